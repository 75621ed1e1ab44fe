package allocator

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// stateHash is a 128-bit Zobrist hash: each state element contributes a
// pseudo-random key, combined with XOR so that adding and removing the same
// element cancel out.
type stateHash [2]uint64

func (h *stateHash) toggle(k stateHash) {
	h[0] ^= k[0]
	h[1] ^= k[1]
}

// add and sub combine keys of a multiset: a device can carry several
// equal shares, whose keys XOR would cancel.
func (h *stateHash) add(k stateHash) {
	h[0] += k[0]
	h[1] += k[1]
}

func (h *stateHash) sub(k stateHash) {
	h[0] -= k[0]
	h[1] -= k[1]
}

const (
	keyMark     = 1
	keyCounters = 2
)

// shareKey is the key of one share that consumes what requests with
// capacity key ck consume, of whichever device.
func shareKey(ck capacityKey) stateHash {
	x := uint64(ck)*0x9e3779b97f4a7c15 ^ 0x2545f4914f6cdd1d
	return stateHash{mix64(x ^ 0x5851f42d4c957f2d), mix64(x ^ 0x14057b7ef767814f)}
}

// sharesHash is the memo's hash of the shares of shared devices: the sum
// of their deviceShareKeys. It is computed when the memo asks, not kept up
// to date with every share: searches that never backtrack never need it.
func (s *search) sharesHash() stateHash {
	var h stateHash
	if !s.sharesSized {
		return h
	}
	for ci := range s.shares {
		if s.shares[ci].count > 0 {
			h.add(s.deviceShareKey(ci))
		}
	}
	return h
}

// deviceShareKey is candidate ci's part of sharesHash: zero without shares,
// otherwise a function of its memo class and of the multiset of its shares
// (the sum of their shareKeys). It leaves out which requests hold the
// shares and which device of its class carries them: no check looks at the
// former, only at whether a device has shares and what they consume
// together (sameShares), and devices of one memo class are interchangeable
// (interchangeable), so that states that differ in either are the same
// state to the memo. Everything else the memo hashes per candidate (marks
// of exclusive devices, counters drawn) keeps the devices apart where it
// matters.
func (s *search) deviceShareKey(ci int) stateHash {
	if !s.sharedNow(ci) {
		return stateHash{}
	}
	use := &s.shares[ci]
	class := s.memoClass(ci)
	x := use.keys[0] + uint64(use.count)*0x94d049bb133111eb
	y := use.keys[1] ^ uint64(use.count)
	return stateHash{mix64(class[0] ^ mix64(x)), mix64(class[1] ^ mix64(y^0x7f4a7c159e3779b9))}
}

// memoClass identifies what a shared device is before this search: what
// the search sees of it (searchClass) and what earlier cycles allocated of
// it. It is computed once per search and candidate.
func (s *search) memoClass(ci int) stateHash {
	if !s.memoClassesSized {
		s.memoClasses = grow(s.memoClasses, len(s.cands))
		s.memoClassesSized = true
	}
	if k := s.memoClasses[ci]; k != (stateHash{}) {
		return k
	}
	c := s.cands[ci]
	id := c.id()
	var h maphash.Hash
	h.SetSeed(memoSeed)
	class := s.searchClass(ci)
	var b [18]byte
	binary.LittleEndian.PutUint64(b[0:], class[0])
	binary.LittleEndian.PutUint64(b[8:], class[1])
	if s.isAllocatedCand(ci) {
		b[16] = 1
	}
	if s.a.sharedDevices().Has(id) {
		b[17] = 1
	}
	h.Write(b[:])
	if consumed, ok := s.a.consumedCapacity(id); ok {
		for _, name := range slices.Sorted(maps.Keys(consumed)) {
			h.WriteString(string(name))
			if q := consumed[name]; q != nil {
				// The exact value; AsDec changes its receiver, a copy.
				value := q.DeepCopy()
				h.WriteString("=" + value.AsDec().String())
			}
			h.WriteByte(0)
		}
	}
	sum := h.Sum64()
	k := stateHash{mix64(sum ^ 0x14057b7ef767814f), mix64(sum ^ 0x5851f42d4c957f2d)}
	s.memoClasses[ci] = k
	return k
}

// candKey derives the key of one state element from the candidate, the
// claim and the element kind with a strong mixer.
func candKey(ci, claim int, kind uint64) stateHash {
	x := uint64(ci)<<32 ^ uint64(uint32(claim))<<1 ^ kind*0x9e3779b97f4a7c15
	return stateHash{mix64(x ^ 0x5851f42d4c957f2d), mix64(x ^ 0x14057b7ef767814f)}
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// maxMemoEntries bounds the memo of one search. Beyond it the search goes on
// without remembering more failures.
const maxMemoEntries = 1 << 18

type memoKey struct {
	claim, request, results int
	hash, shares            stateHash
}

var memoSeed = maphash.MakeSeed()

// memoKey describes the state at a request boundary. The future of the
// search depends on the devices in use (and by which claim), counters and
// capacity drawn, the constraint state of the current claim and how many
// results it holds; the incremental hashes cover the first three.
func (s *search) memoKey(r pos) (memoKey, bool) {
	key := memoKey{claim: r.claim, request: r.request, hash: s.hash, shares: s.sharesHash()}
	if r.claim >= len(s.claims) {
		return key, false
	}
	key.results = len(s.results[r.claim])
	if r.request == 0 || len(s.constraints[r.claim]) == 0 {
		// A fresh claim has fresh constraints.
		return key, true
	}
	var h maphash.Hash
	h.SetSeed(memoSeed)
	for i := range s.constraints[r.claim] {
		cs := &s.constraints[r.claim][i]
		_, _ = fmt.Fprintf(&h, "|%d:", cs.numDevices)
		switch {
		case cs.numDevices == 0:
		case cs.spec.match && cs.listSemantics:
			h.WriteString(setFingerprint(cs.intersections[cs.numDevices-1]))
		case cs.spec.match:
			h.WriteString(attrFingerprint(cs.first))
		default:
			prints := make([]string, len(cs.distinct))
			for j, attr := range cs.distinct {
				prints[j] = attrFingerprint(attr)
			}
			slices.Sort(prints)
			h.WriteString(strings.Join(prints, ","))
		}
	}
	sum := h.Sum64()
	key.hash[0] ^= mix64(sum ^ 0x2545f4914f6cdd1d)
	key.hash[1] ^= mix64(sum ^ 0x7f4a7c159e3779b9)
	return key, true
}

func attrFingerprint(attr *resourceapi.DeviceAttribute) string {
	if key, ok := scalarKey(attr); ok {
		return key
	}
	if set := attributeAsSet(attr); set != nil {
		return "l" + setFingerprint(set)
	}
	return "?"
}

func setFingerprint(set *attributeSet) string {
	var parts []string
	switch {
	case set.ints != nil:
		for v := range set.ints {
			parts = append(parts, fmt.Sprintf("i%d", v))
		}
	case set.bools != nil:
		for v := range set.bools {
			parts = append(parts, fmt.Sprintf("b%t", v))
		}
	case set.strings != nil:
		for v := range set.strings {
			parts = append(parts, "s"+v)
		}
	case set.versions != nil:
		for v := range set.versions {
			parts = append(parts, "v"+v)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x00")
}
