package core

import (
	resourceapi "k8s.io/api/resource/v1"
)

// PoolID names a resource pool: the driver's pool of that name.
type PoolID struct {
	Driver, Pool string
}

func (id PoolID) String() string { return id.Driver + "/" + id.Pool }

// Pool is what a resource pool publishes now: the ResourceSlices of its
// newest generation.
type Pool struct {
	PoolID
	Generation int64
	// Slices are the pool's slices of Generation, in the input's order.
	Slices []*resourceapi.ResourceSlice
}

// Complete reports whether the pool has as many slices of its generation
// as they say it has (ResourceSliceCount). An incomplete pool is being
// published or replaced: the allocator allocates none of its devices and
// the ResourcePoolStatusRequest controller reports no counts for it.
func (p *Pool) Complete() bool {
	return int64(len(p.Slices)) == p.Slices[0].Spec.Pool.ResourceSliceCount
}

// Device returns the pool's device of that name and its slice; nil and nil
// when the pool has none.
func (p *Pool) Device(name string) (*resourceapi.Device, *resourceapi.ResourceSlice) {
	for _, s := range p.Slices {
		for i := range s.Spec.Devices {
			if s.Spec.Devices[i].Name == name {
				return &s.Spec.Devices[i], s
			}
		}
	}
	return nil, nil
}

// NewestPools groups the slices by pool and keeps each pool's newest
// generation, the one the scheduler allocates from: a driver that
// republishes a pool writes its slices with a higher generation and then
// deletes the older ones, so an older generation is on its way out. The
// allocator gathers its pools per node, with its own indexes, by the same
// rule.
func NewestPools(slices []*resourceapi.ResourceSlice) map[PoolID]*Pool {
	pools := map[PoolID]*Pool{}
	for _, s := range slices {
		id := PoolID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name}
		p := pools[id]
		switch {
		case p == nil:
			pools[id] = &Pool{PoolID: id, Generation: s.Spec.Pool.Generation, Slices: []*resourceapi.ResourceSlice{s}}
		case s.Spec.Pool.Generation > p.Generation:
			p.Generation, p.Slices = s.Spec.Pool.Generation, []*resourceapi.ResourceSlice{s}
		case s.Spec.Pool.Generation == p.Generation:
			p.Slices = append(p.Slices, s)
		}
	}
	return pools
}
