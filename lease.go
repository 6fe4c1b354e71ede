package ferry

import "time"

// Named leases and checkpoints serve periodic work that one instance of a
// cluster does at a time (catch-up, pushed alerts): the lease says who runs
// it now, the checkpoint how far it got. Both live in the store, timed on
// the database's clock, so instances need no other coordination.

// LeaseAcquireParams are Store.LeaseAcquire's: which lease, for which
// instance, for how long. Validate requires all three.
type LeaseAcquireParams struct {
	// Name names the work ("catchup:stripe"). Required.
	Name string
	// Owner names the instance. Required. Acquiring again as the same owner
	// renews the lease.
	Owner string
	// TTL is how long the lease holds from the database's now unless renewed.
	// Required, positive.
	TTL time.Duration
}

// LeaseReleaseParams are Store.LeaseRelease's: the lease's Name and the
// Owner that holds it, both required; another owner's lease is left alone.
type LeaseReleaseParams struct {
	Name  string
	Owner string
}

// CheckpointGetParams name the checkpoint Store.CheckpointGet reads.
// Name is required.
type CheckpointGetParams struct {
	Name string
}

// CheckpointPutParams are Store.CheckpointPut's: the checkpoint to set and
// its new Value, which replaces the old one.
type CheckpointPutParams struct {
	// Name names the work. Required.
	Name string
	// Value is the work's own record of its progress (a time, a cursor).
	Value string
	// Lease, when set, fences the write: it happens only while Lease (the
	// name given to LeaseAcquire) is Owner's and unexpired by the database's
	// clock; otherwise nothing changes and CheckpointPut returns
	// ErrLeaseLost. Work that runs under a named lease sets it, so that an
	// instance that paused past its lease cannot move back a checkpoint its
	// successor has moved on. Optional; Owner is required with it.
	Lease string
	// Owner is the instance that holds Lease.
	Owner string
}

// Checkpoint is how far a piece of periodic work got.
type Checkpoint struct {
	Name  string
	Value string
	// UpdatedAt is the database's time of the last CheckpointPut.
	UpdatedAt time.Time
}

// Origin says how an event reached the inbox.
type Origin string

const (
	// OriginDelivery: the provider delivered it to the receiver. The default.
	OriginDelivery Origin = "delivery"
	// OriginCatchup: a reconciler fetched it from the provider's API because
	// the provider never delivered it (package catchup).
	OriginCatchup Origin = "catchup"
)

// Valid reports whether o is one of the two origins.
func (o Origin) Valid() bool { return o == OriginDelivery || o == OriginCatchup }

// OrDelivery returns o, or OriginDelivery when o is empty.
func (o Origin) OrDelivery() Origin {
	if o == "" {
		return OriginDelivery
	}
	return o
}

// Validate requires a Name and an Owner of text a store keeps (UTF-8
// without NUL) and a positive TTL.
func (p *LeaseAcquireParams) Validate() error {
	if p.TTL <= 0 {
		return invalid("ttl must be positive, got %s", p.TTL)
	}
	return validNameOwner(p.Name, p.Owner)
}

// Validate requires a Name and an Owner of UTF-8 text without NUL.
func (p *LeaseReleaseParams) Validate() error { return validNameOwner(p.Name, p.Owner) }

func validNameOwner(name, owner string) error {
	if err := requiredText("name", name); err != nil {
		return err
	}
	return requiredText("owner", owner)
}

// Validate requires a Name of UTF-8 text without NUL.
func (p *CheckpointGetParams) Validate() error { return requiredText("name", p.Name) }

// Validate requires a Name, and a Name, a Value, a Lease and an Owner of
// UTF-8 text without NUL, with Lease and Owner both set or both empty.
func (p *CheckpointPutParams) Validate() error {
	if err := requiredText("name", p.Name); err != nil {
		return err
	}
	if !storable(p.Value) {
		return invalid("value is not UTF-8 text without NUL")
	}
	if (p.Lease == "") != (p.Owner == "") {
		return invalid("lease and owner go together: both or neither")
	}
	if p.Lease == "" {
		return nil
	}
	if err := requiredText("lease", p.Lease); err != nil {
		return err
	}
	return requiredText("owner", p.Owner)
}
