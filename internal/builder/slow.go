package builder

import "fmt"

// SlowSelector is a CEL device selector that is valid, within the API
// server's cost limit, and slow: five nested comprehensions over literal
// lists compare 40,000 sums with the device's int attribute domain/name,
// and for a device whose attribute is negative none is equal, so no
// comprehension stops early and the selector is false. A claim with it is
// accepted (the cost estimate is below CELSelectorExpressionMaxCost) and
// each evaluation runs to its end (so is the runtime cost), taking tens to
// hundreds of milliseconds per device, depending on the machine. On a few
// thousand devices it keeps an allocator busy for minutes, which is what
// the tests of time limits need: an outcome that no machine reaches within
// a limit of a second. TestSlowSelector checks the costs.
//
// The allocator caches a selector's result per slice version, so only the
// first evaluation on each device is slow.
func SlowSelector(domain, name string) string {
	ten := "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
	expr := fmt.Sprintf("[0, 1, 2, 3].exists(e, a + b + c + d + e == device.attributes[%q].%s)", domain, name)
	for _, v := range []string{"d", "c", "b", "a"} {
		expr = fmt.Sprintf("%s.exists(%s, %s)", ten, v, expr)
	}
	return expr
}
