package inflight

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-proxy/sluice/limiter/store"
)

// Instance defaults.
const (
	DefaultIDKey        = "sluice.cc.instance"
	DefaultStaleAfter   = 10 * time.Second
	DefaultRefreshAfter = 2 * time.Second
	// ReleaseRetries is the CAS retry budget of a release and a refresh:
	// larger than an admission's, because a release that cannot be written
	// leaves the record over-counting until the next Refresh.
	ReleaseRetries = 32

	idRetries = 16
)

// ErrContention is returned when CAS retries run out.
var ErrContention = errors.New("inflight: cas retries exhausted")

// InstanceConfig configures an Instance. Every VM sharing a store must use
// the same values. Zero values mean the defaults.
type InstanceConfig struct {
	// IDKey is the shared-data key of the instance id counter.
	IDKey string
	// StaleAfter is how long an entry counts after its last write.
	StaleAfter time.Duration
	// RefreshAfter is the age at which Refresh rewrites an entry; it must
	// be below StaleAfter, with room for the caller's timer period.
	RefreshAfter time.Duration
	// Random seeds the id counter when its value is unreadable, so that new
	// ids are unlikely to collide with live ones. Nil: crypto/rand.
	Random func() uint32
}

// Instance is one VM among all that share a store: its id and, per record
// it holds entries in, its own counts. It is not safe for concurrent use;
// a VM runs one callback at a time.
type Instance struct {
	store        store.Store
	idKey        string
	id           uint32
	staleAfter   int64
	refreshAfter int64
	random       func() uint32
	held         map[string]*hold
	scratch      []Entry
	buf          []byte
}

// hold is what this instance holds in one record.
type hold struct {
	table *Table // for stats; nil for tally records
	fps   []fpCount
	// beat is the time of the last write of these entries.
	beat int64
	// dirty marks a record whose last change could not be written.
	dirty bool
}

type fpCount struct {
	fp uint64
	n  uint32
}

func (h *hold) count(fp uint64) uint32 {
	if h == nil {
		return 0
	}
	for _, c := range h.fps {
		if c.fp == fp {
			return c.n
		}
	}
	return 0
}

func (h *hold) add(fp uint64, delta int) {
	for i := range h.fps {
		if h.fps[i].fp == fp {
			n := int64(h.fps[i].n) + int64(delta)
			if n <= 0 {
				h.fps = append(h.fps[:i], h.fps[i+1:]...)
			} else {
				h.fps[i].n = uint32(n)
			}
			return
		}
	}
	if delta > 0 {
		h.fps = append(h.fps, fpCount{fp: fp, n: uint32(delta)})
	}
}

// NewInstance returns an Instance over s. It makes no store call: its id
// is allocated on first use, because a proxy-wasm VM may not touch shared
// data while it starts.
func NewInstance(s store.Store, cfg InstanceConfig) (*Instance, error) {
	if s == nil {
		return nil, errors.New("inflight: nil store")
	}
	if cfg.IDKey == "" {
		cfg.IDKey = DefaultIDKey
	}
	if cfg.StaleAfter == 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.RefreshAfter == 0 {
		cfg.RefreshAfter = DefaultRefreshAfter
	}
	if cfg.StaleAfter < 0 || cfg.RefreshAfter < 0 || cfg.RefreshAfter >= cfg.StaleAfter {
		return nil, fmt.Errorf("inflight: refresh_after %v must be in (0, stale_after %v)", cfg.RefreshAfter, cfg.StaleAfter)
	}
	if cfg.Random == nil {
		cfg.Random = cryptoRandom
	}
	return &Instance{
		store: s, idKey: cfg.IDKey,
		staleAfter: int64(cfg.StaleAfter), refreshAfter: int64(cfg.RefreshAfter),
		random: cfg.Random, held: map[string]*hold{},
	}, nil
}

func cryptoRandom() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// ID returns the instance id, allocating it if needed.
func (in *Instance) ID() (uint32, error) {
	err := in.ensureID()
	return in.id, err
}

func (in *Instance) ensureID() error {
	if in.id != 0 {
		return nil
	}
	for attempt := 0; attempt <= idRetries; attempt++ {
		v, cas, err := in.store.Get(in.idKey)
		var last uint32
		switch {
		case errors.Is(err, store.ErrNotFound):
			cas = store.CreateCAS
		case err != nil:
			return err
		case len(v) == 4:
			last = binary.LittleEndian.Uint32(v)
		default:
			last = in.random()
		}
		next := last + 1
		if next == 0 {
			next = 1
		}
		err = in.store.Set(in.idKey, binary.LittleEndian.AppendUint32(nil, next), cas)
		if err == nil {
			in.id = next
			return nil
		}
		if !errors.Is(err, store.ErrCASMismatch) {
			return err
		}
	}
	return ErrContention
}

// Held reports how many requests this instance holds in all records, and
// in how many records: what Refresh has to keep alive.
func (in *Instance) Held() (requests, records int) {
	for _, h := range in.held {
		if len(h.fps) > 0 {
			records++
		}
		for _, c := range h.fps {
			requests += int(c.n)
		}
	}
	return requests, records
}

// view is a record as read, without this instance's entries and without
// stale ones.
type view struct {
	others []Entry
	cas    uint32
	exists bool
	// reclaimed is the Count of stale entries the next write drops.
	reclaimed uint64
	stale     bool
	corrupt   bool
	// own is this instance's first entry, for tally records.
	own    Entry
	hasOwn bool
}

func (in *Instance) read(key string, now int64) (view, error) {
	var v view
	value, cas, err := in.store.Get(key)
	if errors.Is(err, store.ErrNotFound) {
		return v, nil
	}
	if err != nil {
		return v, err
	}
	v.cas, v.exists = cas, true
	entries, err := DecodeRecord(in.scratch[:0], value)
	if err != nil {
		v.corrupt = true
		v.others = entries[:0]
		return v, nil
	}
	keep := entries[:0]
	for _, e := range entries {
		if !possible(e, now, in.staleAfter) {
			v.corrupt = true
			break
		}
		switch {
		case e.Instance == in.id:
			if !v.hasOwn {
				v.own, v.hasOwn = e, true
			}
		case !fresh(e, now, in.staleAfter):
			v.reclaimed += uint64(e.Count)
			v.stale = true
		default:
			keep = append(keep, e)
		}
	}
	if v.corrupt {
		keep, v.reclaimed, v.stale, v.hasOwn = entries[:0], 0, false, false
	}
	in.scratch = entries[:0]
	v.others = keep
	return v, nil
}

// commit writes v's other entries and this instance's entries of h, the
// count of fp changed by delta, all with Beat now.
func (in *Instance) commit(key string, v *view, h *hold, fp uint64, delta int, now int64) error {
	b := append(in.buf[:0], recordVersion)
	for _, e := range v.others {
		b = appendEntry(b, e)
	}
	seen := false
	if h != nil {
		for _, c := range h.fps {
			n := int64(c.n)
			if c.fp == fp {
				n += int64(delta)
				seen = true
			}
			if n > 0 {
				b = appendEntry(b, Entry{FP: c.fp, Instance: in.id, Count: uint32(n), Beat: now})
			}
		}
	}
	if !seen && delta > 0 {
		b = appendEntry(b, Entry{FP: fp, Instance: in.id, Count: uint32(delta), Beat: now})
	}
	in.buf = b
	cas := v.cas
	if !v.exists {
		cas = store.CreateCAS
	}
	return in.store.Set(key, b, cas)
}

// holdFor returns the hold of a record, creating it.
func (in *Instance) holdFor(key string, t *Table) *hold {
	h := in.held[key]
	if h == nil {
		h = &hold{}
		in.held[key] = h
	}
	if t != nil {
		h.table = t
	}
	return h
}

// Release gives back a slot taken by Acquire. A release whose record
// cannot be written is done in memory, and the record is rewritten by the
// next Refresh (until then it over-counts). Releasing the zero Slot, or a
// slot twice, does nothing.
func (in *Instance) Release(s Slot, now int64) error {
	t := s.table
	if t == nil {
		return nil
	}
	key := t.bucketKey(s.bucket)
	h := in.held[key]
	if h.count(s.fp) == 0 {
		t.stats.LostReleases++
		return nil
	}
	err := ErrContention
	for attempt := 0; attempt <= ReleaseRetries; attempt++ {
		v, rerr := in.read(key, now)
		if rerr != nil {
			err = rerr
			break
		}
		cerr := in.commit(key, &v, h, s.fp, -1, now)
		if cerr == nil {
			t.noteWrite(&v)
			h.add(s.fp, -1)
			h.beat, h.dirty = now, false
			in.tidy(key, h)
			return nil
		}
		if !errors.Is(cerr, store.ErrCASMismatch) {
			err = cerr
			break
		}
		t.stats.CASMismatches++
	}
	t.stats.ReleaseFailures++
	h.add(s.fp, -1)
	h.dirty = true
	return err
}

func (in *Instance) tidy(key string, h *hold) {
	if len(h.fps) == 0 && !h.dirty {
		delete(in.held, key)
	}
}

// Refresh rewrites every record in which this instance's entries were last
// written at least RefreshAfter ago, or whose last change failed, so that a
// live instance never goes stale. Call it at least once per second or so
// (see the package doc for the bound). It returns the first error; records
// it could not write are retried on the next call.
func (in *Instance) Refresh(now int64) error {
	var first error
	for key, h := range in.held {
		// A beat ahead of now means the clock went back: rewrite at once,
		// or readers would find the entry impossible until the clock
		// caught up with it.
		age := satSub(now, h.beat)
		if !h.dirty && (len(h.fps) == 0 || (age >= 0 && age < in.refreshAfter)) {
			in.tidy(key, h)
			continue
		}
		for attempt := 0; ; attempt++ {
			v, err := in.read(key, now)
			if err == nil {
				err = in.commit(key, &v, h, 0, 0, now)
			}
			if err == nil {
				if h.table != nil {
					h.table.noteWrite(&v)
				}
				h.beat, h.dirty = now, false
				break
			}
			if errors.Is(err, store.ErrCASMismatch) && attempt < ReleaseRetries {
				continue
			}
			if first == nil {
				first = err
			}
			break
		}
		in.tidy(key, h)
	}
	return first
}

// Report sets this instance's entry in the tally record key to count and
// returns the sum over every fresh entry: the requests in flight across
// all live instances. It writes only when something changes or the entry
// is due for a refresh, so a VM with nothing in flight only reads.
func (in *Instance) Report(key string, count uint32, now int64) (int64, error) {
	if err := in.ensureID(); err != nil {
		return int64(count), err
	}
	if count > MaxCount {
		count = MaxCount
	}
	var total int64
	for attempt := 0; ; attempt++ {
		v, err := in.read(key, now)
		if err != nil {
			return int64(count), err
		}
		total = int64(count)
		for _, e := range v.others {
			total += int64(e.Count)
		}
		age := satSub(now, v.own.Beat)
		upToDate := (count == 0 && !v.hasOwn) ||
			(count > 0 && v.hasOwn && v.own.Count == count && age >= 0 && age < in.refreshAfter)
		if upToDate && !v.stale && !v.corrupt {
			return total, nil
		}
		var h *hold
		if count > 0 {
			h = &hold{fps: []fpCount{{fp: 0, n: count}}}
		}
		err = in.commit(key, &v, h, 0, 0, now)
		if err == nil {
			return total, nil
		}
		if !errors.Is(err, store.ErrCASMismatch) || attempt >= ReleaseRetries {
			return total, err
		}
	}
}
