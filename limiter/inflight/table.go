package inflight

import (
	"errors"
	"fmt"

	"github.com/sluice-proxy/sluice/limiter"
	"github.com/sluice-proxy/sluice/limiter/store"
)

// Table defaults and bounds.
const (
	DefaultSlots      = 1 << 12
	MaxSlots          = 1 << 20
	DefaultMaxEntries = 128
	// MaxMaxEntries keeps a record within what decoding accepts.
	MaxMaxEntries     = maxDecodeEntries
	DefaultMaxRetries = 8
	DefaultPrefix     = "sluice.cc."
)

// TableConfig configures a Table. Zero values mean the defaults.
type TableConfig struct {
	// Prefix starts the shared-data key of every bucket. Tables sharing a
	// store need distinct prefixes; keep a limit's prefix across config
	// reloads so its buckets (and the requests in flight) carry over.
	Prefix string
	// Slots is the number of buckets, rounded up to a power of two.
	Slots int
	// Seed is mixed into key fingerprints; every VM must use the same.
	Seed uint64
	// MaxEntries caps the entries of one record.
	MaxEntries int
	// MaxRetries is the CAS retry budget of an admission. Negative: none.
	MaxRetries int
}

// Reason says why an admission was denied or not recorded.
type Reason uint8

const (
	// ReasonNone: admitted and recorded.
	ReasonNone Reason = iota
	// ReasonLimited: max requests of the key are already in flight.
	ReasonLimited
	// ReasonFull: the key's record already holds MaxEntries entries.
	ReasonFull
	// ReasonContention: CAS retries ran out.
	ReasonContention
	// ReasonStoreError: the store failed; the error is returned too.
	ReasonStoreError
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonLimited:
		return "limited"
	case ReasonFull:
		return "full"
	case ReasonContention:
		return "contention"
	case ReasonStoreError:
		return "store_error"
	}
	return "unknown"
}

// Result is one admission decision.
type Result struct {
	// Allowed is the decision: fewer than max were in flight and the slot
	// could be recorded. Without enforcement (shadow) the slot is taken
	// whenever it can be recorded, and Allowed says what an enforcing
	// limit would have decided.
	Allowed bool
	// Taken reports that a slot was recorded and must be released.
	Taken bool
	// InFlight is the key's count when decided, including this request
	// when Taken.
	InFlight int64
	Reason   Reason
}

// Slot is one admitted request's place in a table; give it back with
// Instance.Release. The zero Slot holds nothing.
type Slot struct {
	table  *Table
	bucket uint64
	fp     uint64
}

// Held reports whether s holds a slot.
func (s Slot) Held() bool { return s.table != nil }

// Stats counts events of one Table (per VM) since it was created.
type Stats struct {
	// Reclaimed counts requests of dead instances whose stale entries this
	// VM's writes dropped.
	Reclaimed uint64
	// CorruptRecords counts unreadable records this VM overwrote.
	CorruptRecords uint64
	// CASMismatches counts writes that lost a race.
	CASMismatches uint64
	// Contention counts admissions denied because retries ran out.
	Contention uint64
	// Full counts admissions denied because the record was full.
	Full uint64
	// StoreErrors counts store failures other than CAS mismatches.
	StoreErrors uint64
	// ReleaseFailures counts releases left to the next Refresh.
	ReleaseFailures uint64
	// LostReleases counts releases of slots this VM did not hold.
	LostReleases uint64
}

// Table counts the requests in flight of one limit, for any number of
// keys, in a fixed set of buckets. It is not safe for concurrent use: each
// VM has its own Table (and Instance) over the shared store.
type Table struct {
	store      store.Store
	mask       uint64
	seed       uint64
	maxEntries int
	maxRetries int
	keys       *store.SlotNames
	stats      Stats
}

// NewTable validates cfg and returns a Table over s.
func NewTable(s store.Store, cfg TableConfig) (*Table, error) {
	if s == nil {
		return nil, errors.New("inflight: nil store")
	}
	slots, err := limiter.Option("inflight: slots", cfg.Slots, DefaultSlots, MaxSlots)
	if err != nil {
		return nil, err
	}
	size := limiter.PowerOfTwo(slots)
	maxEntries, err := limiter.Option("inflight: max entries", cfg.MaxEntries, DefaultMaxEntries, MaxMaxEntries)
	if err != nil {
		return nil, err
	}
	retries := limiter.RetriesOption(cfg.MaxRetries, DefaultMaxRetries)
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Table{store: s, mask: uint64(size - 1), seed: cfg.Seed,
		maxEntries: maxEntries, maxRetries: retries, keys: store.NewSlotNames(prefix, uint64(size))}, nil
}

// Stats returns the counters so far.
func (t *Table) Stats() Stats { return t.stats }

// Slots is the number of buckets: the most shared-data keys the table
// creates.
func (t *Table) Slots() int { return int(t.mask + 1) }

// BucketKey is the shared-data key of the record that counts key.
func (t *Table) BucketKey(key string) string {
	return t.bucketKey(limiter.Hash(t.seed, key) & t.mask)
}

// Fingerprint is key's FP in the table's records.
func (t *Table) Fingerprint(key string) uint64 { return limiter.Hash(t.seed, key) }

func (t *Table) bucketKey(i uint64) string { return t.keys.Name(i) }

func (t *Table) noteWrite(v *view) {
	t.stats.Reclaimed += v.reclaimed
	if v.corrupt {
		t.stats.CorruptRecords++
	}
}

// Acquire admits one request of key if fewer than max requests of the key
// are in flight across every live instance, and records it as in's. With
// enforce false (shadow limits) the request is recorded whatever the count,
// so the count stays true, and Result.Allowed says what enforcing would
// have decided. On a store failure the error is returned with a denial
// (ReasonStoreError).
func (t *Table) Acquire(in *Instance, key string, max int64, enforce bool, now int64) (Result, Slot, error) {
	if err := in.ensureID(); err != nil {
		t.stats.StoreErrors++
		return Result{Reason: ReasonStoreError}, Slot{}, fmt.Errorf("inflight: instance id: %w", err)
	}
	fp := limiter.Hash(t.seed, key)
	bucket := fp & t.mask
	bk := t.bucketKey(bucket)
	h := in.held[bk]
	mine := h.count(fp)
	if mine >= MaxCount {
		return Result{InFlight: int64(mine), Reason: ReasonFull}, Slot{}, nil
	}
	for attempt := 0; ; attempt++ {
		v, err := in.read(bk, now)
		if err != nil {
			t.stats.StoreErrors++
			return Result{Reason: ReasonStoreError}, Slot{}, fmt.Errorf("inflight: store: %w", err)
		}
		live := int64(mine)
		own := 0
		if h != nil {
			own = len(h.fps)
		}
		for _, e := range v.others {
			if e.FP == fp {
				live += int64(e.Count)
			}
		}
		res := Result{Allowed: live < max, InFlight: live}
		if !res.Allowed && enforce {
			res.Reason = ReasonLimited
			return res, Slot{}, nil
		}
		if mine == 0 && len(v.others)+own+1 > t.maxEntries {
			t.stats.Full++
			res.Allowed, res.Reason = false, ReasonFull
			return res, Slot{}, nil
		}
		err = in.commit(bk, &v, h, fp, 1, now)
		if err == nil {
			t.noteWrite(&v)
			h = in.holdFor(bk, t)
			h.add(fp, 1)
			h.beat, h.dirty = now, false
			res.Taken, res.InFlight = true, live+1
			return res, Slot{table: t, bucket: bucket, fp: fp}, nil
		}
		if !errors.Is(err, store.ErrCASMismatch) {
			t.stats.StoreErrors++
			return Result{Reason: ReasonStoreError}, Slot{}, fmt.Errorf("inflight: store: %w", err)
		}
		t.stats.CASMismatches++
		if attempt >= t.maxRetries {
			t.stats.Contention++
			res.Allowed, res.Reason = false, ReasonContention
			return res, Slot{}, nil
		}
	}
}

// InFlight reads key's count at now without changing anything.
func (t *Table) InFlight(in *Instance, key string, now int64) (int64, error) {
	fp := limiter.Hash(t.seed, key)
	bk := t.bucketKey(fp & t.mask)
	v, err := in.read(bk, now)
	if err != nil {
		return 0, err
	}
	n := int64(in.held[bk].count(fp))
	for _, e := range v.others {
		if e.FP == fp {
			n += int64(e.Count)
		}
	}
	return n, nil
}
