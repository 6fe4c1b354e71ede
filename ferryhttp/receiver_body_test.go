package ferryhttp

import (
	"encoding/json"
	"strings"
	"testing"
)

// answer.body must write what json.Encoder wrote for the same answer before
// it: clients may compare bodies byte for byte.
func TestAnswerBodyIsEncoderOutput(t *testing.T) {
	all := []answer{answerAccepted, answerDuplicate, answerConflict, answerNoSource, answerMethod,
		answerTooLarge, answerUnreadable, answerBodyTimeout, answerUnavailable, answerTimeout, answerDraining,
		answerStarting, answerBusy, answerClientGone,
		verifyAnswer(nil)}
	for _, va := range verifyAnswers {
		all = append(all, va.answer)
	}
	for _, a := range all {
		m := map[string]string{"status": a.outcome}
		if a.reason != "" {
			m["error"] = a.reason
		}
		var want strings.Builder
		if err := json.NewEncoder(&want).Encode(m); err != nil {
			t.Fatal(err)
		}
		if got := a.body(); got != want.String() {
			t.Errorf("%+v: body %q, encoder %q", a, got, want.String())
		}
	}
}
