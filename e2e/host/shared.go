package host

import (
	"context"
	"sync"
)

// sharedStore is the shared data of one vm_id: one lock for all workers, as
// in proxy-wasm-cpp-host's SharedData.
type sharedStore struct {
	mu sync.Mutex
	m  map[string]sharedEntry
}

type sharedEntry struct {
	val []byte
	cas uint32
}

// get is the entry of key. Values are immutable once stored, so the
// caller may read it outside the lock.
func (s *sharedStore) get(key string) (sharedEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, found := s.m[key]
	return e, found
}

func hGetSharedData(v *vm, ctx context.Context, s []uint64) {
	a := v.args(s)
	key := a.string(0)
	if a.failed() {
		return
	}
	e, found := v.p.store().get(key)
	if !found {
		ok(s, StatusNotFound)
		return
	}
	wrote(s, v.copyOut(ctx, e.val, uint32(s[2]), uint32(s[3])) && v.mem.WriteUint32Le(uint32(s[4]), e.cas))
}

func hSetSharedData(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	key, val := a.string(0), a.bytes(2)
	if a.failed() {
		return
	}
	cas := uint32(s[4])
	store := v.p.store()
	store.mu.Lock()
	defer store.mu.Unlock()
	if e, found := store.m[key]; found && cas != 0 && cas != e.cas {
		ok(s, StatusCasMismatch)
		return
	}
	store.m[key] = sharedEntry{val: append([]byte(nil), val...), cas: v.p.rt.nextCAS()}
	ok(s, StatusOK)
}

func (p *Plugin) store() *sharedStore { return p.shared }

// ---- shared queues ----

type queueKey struct{ vmID, name string }

type sharedQueue struct {
	key   queueKey
	items [][]byte
	owner *vm // VM whose root context gets proxy_on_queue_ready
	token uint32
}

type queueRegistry struct {
	mu     sync.Mutex
	byKey  map[queueKey]*sharedQueue
	byID   map[uint32]*sharedQueue
	nextID uint32
}

func newQueueRegistry() *queueRegistry {
	return &queueRegistry{byKey: map[queueKey]*sharedQueue{}, byID: map[uint32]*sharedQueue{}}
}

func hRegisterQueue(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	name := a.string(0)
	if a.failed() {
		return
	}
	qr := v.p.rt.queues
	qr.mu.Lock()
	k := queueKey{v.p.cfg.VMID, name}
	q := qr.byKey[k]
	if q == nil {
		qr.nextID++
		q = &sharedQueue{key: k, token: qr.nextID}
		qr.byKey[k] = q
		qr.byID[q.token] = q
	}
	q.owner = v
	qr.mu.Unlock()
	wrote(s, v.mem.WriteUint32Le(uint32(s[2]), q.token))
}

func hResolveQueue(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	vmID, name := a.string(0), a.string(2)
	if a.failed() {
		return
	}
	qr := v.p.rt.queues
	qr.mu.Lock()
	q := qr.byKey[queueKey{vmID, name}]
	qr.mu.Unlock()
	if q == nil {
		ok(s, StatusNotFound)
		return
	}
	wrote(s, v.mem.WriteUint32Le(uint32(s[4]), q.token))
}

// withQueue runs f on the queue of id under the registry's lock, and is
// NotFound when there is none.
func (qr *queueRegistry) withQueue(id uint32, f func(q *sharedQueue) Status) Status {
	qr.mu.Lock()
	defer qr.mu.Unlock()
	q := qr.byID[id]
	if q == nil {
		return StatusNotFound
	}
	return f(q)
}

func hDequeue(v *vm, ctx context.Context, s []uint64) {
	var item []byte
	st := v.p.rt.queues.withQueue(uint32(s[0]), func(q *sharedQueue) Status {
		if len(q.items) == 0 {
			return StatusEmpty
		}
		item, q.items = q.items[0], q.items[1:]
		return StatusOK
	})
	if st != StatusOK {
		ok(s, st)
		return
	}
	v.replyBytes(ctx, s, item, uint32(s[1]), uint32(s[2]))
}

func hEnqueue(v *vm, _ context.Context, s []uint64) {
	a := v.args(s)
	data := a.bytes(1)
	if a.failed() {
		return
	}
	var owner *vm
	var token uint32
	st := v.p.rt.queues.withQueue(uint32(s[0]), func(q *sharedQueue) Status {
		q.items = append(q.items, append([]byte(nil), data...))
		owner, token = q.owner, q.token
		return StatusOK
	})
	if st != StatusOK {
		ok(s, st)
		return
	}
	if owner != nil && owner.worker >= 0 {
		// Delivered as an event on the owner's loop, as Envoy posts it to
		// the owner's dispatcher; the enqueuer does not wait for it.
		w := owner.p.workers[owner.worker]
		w.loop.post(taskFunc(func() {
			if w.vm == owner && !owner.failed && !owner.closed {
				owner.call(rootContextID, owner.fnQueueReady, rootContextID, uint64(token))
			}
		}))
	}
	ok(s, StatusOK)
}
