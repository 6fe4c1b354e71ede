package provider

// Parsers exported to the external tests, for fuzzing.
var (
	ParseStripeHeader               = parseStripeHeader
	ParseStandardWebhooksSignatures = parseStandardWebhooksSignatures
	DecodeSignature                 = decodeSignature
)
