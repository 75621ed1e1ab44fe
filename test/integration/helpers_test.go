package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/drasched/drasched/test/integration/framework"
)

// msgCannotAllocate is what upstream's DynamicResources says, per node,
// when the devices do not fit. StructuredDRA says why instead; no message
// may fall back to it.
const msgCannotAllocate = "cannot allocate all claims"

// assertUnschedulableMessage checks the message of an Unschedulable
// PodScheduled condition, as WaitForPodUnschedulable returns it: it says
// each of wants, and not only upstream's "cannot allocate all claims".
func assertUnschedulableMessage(t *testing.T, message string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(message, want) {
			t.Errorf("PodScheduled condition message %q does not say %q", message, want)
		}
	}
	if strings.Contains(message, msgCannotAllocate) {
		t.Errorf("PodScheduled condition message %q does not say why the devices do not fit", message)
	}
}

// driverSelector is a CEL expression on a string attribute of the test's
// driver.
func driverSelector(env *framework.Env, attribute, value string) string {
	return fmt.Sprintf("device.attributes[%q].%s == %q", env.Driver, attribute, value)
}
