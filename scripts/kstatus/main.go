// Command kstatus prints the kstatus library's verdict on Kubernetes objects.
//
// It reads one JSON object per line on stdin and writes, per object, one JSON line
// {"status": "Current|InProgress|Failed|Terminating|NotFound|Unknown", "message": "..."}
// (or {"error": "..."}), as computed by sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute:
// the same computation Flux and the cli-utils apply/wait logic use. setpoint's integration
// tests use it to check the conditions a controller maintains (scripts/build_kstatus.py
// builds it into ~/.cache/setpoint/kstatus).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		verdict := map[string]string{}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(line); err != nil {
			verdict["error"] = err.Error()
		} else if res, err := status.Compute(obj); err != nil {
			verdict["error"] = err.Error()
		} else {
			verdict["status"] = string(res.Status)
			verdict["message"] = res.Message
		}
		if err := out.Encode(verdict); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
