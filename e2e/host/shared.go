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

func hGetSharedData(v *vm, ctx context.Context, s []uint64) {
	key, good := v.readString(uint32(s[0]), uint32(s[1]))
	if !good {
		ok(s, StatusInvalidMemoryAccess)
		return
	}
	store := v.p.store()
	store.mu.Lock()
	e, found := store.m[key]
	store.mu.Unlock()
	if !found {
		ok(s, StatusNotFound)
		return
	}
	// Values are immutable once stored, so copying outside the lock is safe.
	wrote(s, v.copyOut(ctx, e.val, uint32(s[2]), uint32(s[3])) && v.mem.WriteUint32Le(uint32(s[4]), e.cas))
}

func hSetSharedData(v *vm, _ context.Context, s []uint64) {
	key, ok1 := v.readString(uint32(s[0]), uint32(s[1]))
	val, ok2 := v.read(uint32(s[2]), uint32(s[3]))
	if !ok1 || !ok2 {
		ok(s, StatusInvalidMemoryAccess)
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
	name, good := v.readString(uint32(s[0]), uint32(s[1]))
	if !good {
		ok(s, StatusInvalidMemoryAccess)
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
	vmID, ok1 := v.readString(uint32(s[0]), uint32(s[1]))
	name, ok2 := v.readString(uint32(s[2]), uint32(s[3]))
	if !ok1 || !ok2 {
		ok(s, StatusInvalidMemoryAccess)
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

func hDequeue(v *vm, ctx context.Context, s []uint64) {
	qr := v.p.rt.queues
	qr.mu.Lock()
	q := qr.byID[uint32(s[0])]
	if q == nil {
		qr.mu.Unlock()
		ok(s, StatusNotFound)
		return
	}
	if len(q.items) == 0 {
		qr.mu.Unlock()
		ok(s, StatusEmpty)
		return
	}
	item := q.items[0]
	q.items = q.items[1:]
	qr.mu.Unlock()
	v.replyBytes(ctx, s, item, uint32(s[1]), uint32(s[2]))
}

func hEnqueue(v *vm, _ context.Context, s []uint64) {
	data, good := v.read(uint32(s[1]), uint32(s[2]))
	if !good {
		ok(s, StatusInvalidMemoryAccess)
		return
	}
	qr := v.p.rt.queues
	qr.mu.Lock()
	q := qr.byID[uint32(s[0])]
	if q == nil {
		qr.mu.Unlock()
		ok(s, StatusNotFound)
		return
	}
	q.items = append(q.items, append([]byte(nil), data...))
	owner, token := q.owner, q.token
	qr.mu.Unlock()
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
