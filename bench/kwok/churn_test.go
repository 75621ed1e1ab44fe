package main

import "testing"

func TestChurnPod(t *testing.T) {
	total := 0
	for i := range len(churnSizes) * 10 {
		total += gpusOf(t, churnPod(i).template)
	}
	if avg := float64(total) / float64(len(churnSizes)*10); avg != 2 {
		t.Errorf("average churn pod takes %.2f GPUs, want 2", avg)
	}
	if churnPod(0).name == churnPod(1).name {
		t.Error("churn pods share a name")
	}
}
