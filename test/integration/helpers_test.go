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

// waitForUnschedulableMessage waits until the pod's Unschedulable
// PodScheduled condition says each of wants, and checks that it says more
// than upstream's "cannot allocate all claims".
func waitForUnschedulableMessage(t *testing.T, env *framework.Env, pod string, wants ...string) {
	t.Helper()
	message := env.WaitForPodUnschedulable(pod, wants...)
	if strings.Contains(message, msgCannotAllocate) {
		t.Errorf("PodScheduled condition message %q does not say why the devices do not fit", message)
	}
}

// driverSelector is a CEL expression on a string attribute of the test's
// driver.
func driverSelector(env *framework.Env, attribute, value string) string {
	return fmt.Sprintf("device.attributes[%q].%s == %q", env.Driver, attribute, value)
}
