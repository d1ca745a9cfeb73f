package limitsvc

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/sluice-proxy/sluice/breaker"
)

// Entry is one lookup key's state in shared data, written with CAS by
// every worker: the cached answer, the lookup in flight (singleflight)
// and the key's breaker.
type Entry struct {
	// FP is the lookup key's fingerprint; a slot holding another FP
	// belongs to another key.
	FP uint64
	// Seq counts finished lookups. A waiter remembers it and wakes when it
	// changes: the answer it waited for has landed, or failed.
	Seq uint32
	// Inflight is when the lookup in flight was claimed (Unix ns); 0 when
	// none is.
	Inflight int64
	// HasAnswer is set once a lookup succeeded; Answer is then the last
	// answer (MaxAge and NoStore are not kept).
	HasAnswer bool
	// Failed is set when the last finished lookup failed.
	Failed bool
	// FreshUntil is when Answer stops being served without a lookup, and
	// StaleUntil when it stops being used when a lookup fails (Unix ns).
	FreshUntil, StaleUntil int64
	Answer                 Answer
	// Breaker is the key's breaker state, for a breaker without a failure
	// window.
	Breaker breaker.Record
}

// Encoded layout, little endian, version 3 (1 had no failure code, 2 no
// backend URL):
//
//	0       version (1)
//	1       flags: bit 0 has answer, bit 1 failed, bit 2 unlimited
//	2       policy
//	3..11   fingerprint
//	11..15  seq
//	15..23  inflight
//	23..31  fresh until
//	31..39  stale until
//	39..47  rate
//	47..55  period (ns)
//	55..63  burst
//	63..65  failure code (0: none)
//	65..67  tenant key length n
//	67..69  backend URL length u
//	69..    tenant key (n bytes), backend URL (u bytes), then the breaker
//	        record
const (
	entryVersion   = 3
	entryHeaderLen = 69
	flagHasAnswer  = 1 << 0
	flagFailed     = 1 << 1
	flagUnlimited  = 1 << 2
)

// breakerLen is the encoded length of a breaker record without a failure
// window, the only kind an entry holds: decoding refuses any other, so a
// record with a window can never reach a machine configured without one.
var breakerLen = func() int {
	m, err := breaker.NewMachine(breaker.DefaultSettings())
	if err != nil {
		panic(err) // the defaults are valid
	}
	var r breaker.Record
	m.Reset(&r)
	return len(r.Encode(nil))
}()

// MaxEntryLen is the largest encoded Entry.
var MaxEntryLen = entryHeaderLen + MaxTenantKey + MaxBackendURL + breakerLen

// ErrCorrupt is returned for bytes that are not an Entry this version
// wrote; the filter then treats the slot as empty.
var ErrCorrupt = errors.New("limitsvc: corrupt cache entry")

// Encode appends e to buf.
func (e *Entry) Encode(buf []byte) []byte {
	le := binary.LittleEndian
	var flags byte
	if e.HasAnswer {
		flags |= flagHasAnswer
	}
	if e.Failed {
		flags |= flagFailed
	}
	if e.Answer.Unlimited {
		flags |= flagUnlimited
	}
	buf = append(buf, entryVersion, flags, byte(e.Answer.Policy))
	buf = le.AppendUint64(buf, e.FP)
	buf = le.AppendUint32(buf, e.Seq)
	for _, v := range [...]int64{e.Inflight, e.FreshUntil, e.StaleUntil, e.Answer.Rate, int64(e.Answer.Period), e.Answer.Burst} {
		buf = le.AppendUint64(buf, uint64(v))
	}
	buf = le.AppendUint16(buf, uint16(e.Answer.FailureCode))
	buf = le.AppendUint16(buf, uint16(len(e.Answer.TenantKey)))
	buf = le.AppendUint16(buf, uint16(len(e.Answer.BackendURL)))
	buf = append(buf, e.Answer.TenantKey...)
	buf = append(buf, e.Answer.BackendURL...)
	return e.Breaker.Encode(buf)
}

// Decode reads an Entry. Only what Encode can write is accepted: an
// answer that is a valid limit, a bounded tenant key, a breaker record
// without a window.
func (e *Entry) Decode(b []byte) error {
	le := binary.LittleEndian
	if len(b) < entryHeaderLen || b[0] != entryVersion {
		return ErrCorrupt
	}
	flags, pol := b[1], Policy(b[2])
	if flags&^(flagHasAnswer|flagFailed|flagUnlimited) != 0 || pol > PolicyLocal {
		return ErrCorrupt
	}
	var v [6]int64
	for i := range v {
		v[i] = int64(le.Uint64(b[15+8*i:]))
	}
	code := int(le.Uint16(b[63:]))
	n := int(le.Uint16(b[65:]))
	u := int(le.Uint16(b[67:]))
	if n > MaxTenantKey || u > MaxBackendURL || len(b) != entryHeaderLen+n+u+breakerLen {
		return ErrCorrupt
	}
	*e = Entry{
		FP:         le.Uint64(b[3:]),
		Seq:        le.Uint32(b[11:]),
		Inflight:   v[0],
		HasAnswer:  flags&flagHasAnswer != 0,
		Failed:     flags&flagFailed != 0,
		FreshUntil: v[1],
		StaleUntil: v[2],
		Answer: Answer{
			Unlimited:   flags&flagUnlimited != 0,
			Rate:        v[3],
			Period:      time.Duration(v[4]),
			Burst:       v[5],
			TenantKey:   string(b[entryHeaderLen : entryHeaderLen+n]),
			Policy:      pol,
			FailureCode: code,
			BackendURL:  string(b[entryHeaderLen+n : entryHeaderLen+n+u]),
		},
	}
	if e.Inflight < 0 || e.FreshUntil < 0 || e.StaleUntil < e.FreshUntil ||
		(code != 0 && (code < MinFailureCode || code > MaxFailureCode || !e.HasAnswer)) {
		return ErrCorrupt
	}
	a := &e.Answer
	switch {
	case !e.HasAnswer:
		if a.Unlimited || a.Rate != 0 || a.Period != 0 || a.Burst != 0 || n != 0 || u != 0 || a.Policy != PolicyDefault {
			return ErrCorrupt
		}
	case a.Unlimited:
		if a.Rate != 0 || a.Period != 0 || a.Burst != 0 {
			return ErrCorrupt
		}
	case a.Rate > MaxRate || a.Burst > MaxRate || a.Period < MinPeriod || a.Period > MaxPeriod || a.Limit().Validate() != nil:
		return ErrCorrupt
	}
	if err := e.Breaker.Decode(b[entryHeaderLen+n+u:]); err != nil {
		return ErrCorrupt
	}
	return nil
}
