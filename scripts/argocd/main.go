// Command argocd runs Argo CD's health checks and diff normalizers the way Argo CD runs them.
//
// Usage:
//
//	argocd health SCRIPT.lua < objects.jsonl
//	argocd ignore JQ_PATH_EXPRESSION... < objects.jsonl
//
// Both read one Kubernetes object as JSON per line on stdin and write one JSON line per
// object (or {"error": "..."}).
//
// health writes {"status": "Healthy|Progressing|Degraded|Suspended|Missing|Unknown",
// "message": "..."}. The script runs as Argo CD runs a
// resource.customizations.health.<group>_<Kind> script from argocd-cm (util/lua in
// Argo CD): gopher-lua with the standard libraries skipped except package, base and
// table, the object as the global `obj` (integers as numbers, as Kubernetes' unstructured
// decoding gives them), a one-second limit, the returned table read for status and
// message, and a status outside Argo CD's set read as Unknown.
//
// ignore writes the object after each ignoreDifferences jqPathExpression was applied as
// Argo CD's diff normalizer applies it: gojq compiles `del(EXPRESSION)` and the first
// output replaces the object.
//
// setpoint's tests use it to check what `setpoint generate gitops` writes
// (scripts/build_argocd.py builds it into ~/.cache/setpoint/argocd).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/itchyny/gojq"
	lua "github.com/yuin/gopher-lua"
)

var validStatus = map[string]bool{
	"Unknown": true, "Progressing": true, "Suspended": true,
	"Healthy": true, "Degraded": true, "Missing": true,
}

// decode turns a JSON value into a Lua value as Argo CD's decodeValue does.
func decode(l *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return lua.LNumber(i)
		}
		f, _ := v.Float64()
		return lua.LNumber(f)
	case string:
		return lua.LString(v)
	case []interface{}:
		arr := l.CreateTable(len(v), 0)
		for _, item := range v {
			arr.Append(decode(l, item))
		}
		return arr
	case map[string]interface{}:
		tbl := l.CreateTable(0, len(v))
		for key, item := range v {
			tbl.RawSetH(lua.LString(key), decode(l, item))
		}
		return tbl
	}
	return lua.LNil
}

func health(script string, line []byte) interface{} {
	var obj interface{}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return map[string]string{"error": err.Error()}
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.fn), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return map[string]string{"error": err.Error()}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", decode(l, obj))
	if err := l.DoString(script); err != nil {
		return map[string]string{"error": err.Error()}
	}
	ret := l.Get(-1)
	table, ok := ret.(*lua.LTable)
	if !ok {
		return map[string]string{"error": fmt.Sprintf("expect table output from Lua script, not %s", ret.Type())}
	}
	status := lua.LVAsString(table.RawGetString("status"))
	message := lua.LVAsString(table.RawGetString("message"))
	if !validStatus[status] {
		return map[string]string{"status": "Unknown", "message": "Lua returned an invalid health status"}
	}
	return map[string]string{"status": status, "message": message}
}

// ignore applies each compiled del(expression) in turn, as Argo CD's normalizer does.
func ignore(codes []*gojq.Code, line []byte) interface{} {
	var obj interface{}
	if err := json.Unmarshal(line, &obj); err != nil {
		return map[string]string{"error": err.Error()}
	}
	for _, code := range codes {
		first, ok := code.Run(obj).Next()
		if !ok {
			return map[string]string{"error": "jq expression did not return any data"}
		}
		if err, isErr := first.(error); isErr {
			return map[string]string{"error": "jq expression error: " + err.Error()}
		}
		obj = first
	}
	return obj
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 3 || (os.Args[1] != "health" && os.Args[1] != "ignore") {
		fail(fmt.Errorf("usage: argocd health SCRIPT.lua | argocd ignore JQ_PATH_EXPRESSION... (objects as JSON lines on stdin)"))
	}
	var each func([]byte) interface{}
	if os.Args[1] == "health" {
		script, err := os.ReadFile(os.Args[2])
		if err != nil {
			fail(err)
		}
		each = func(line []byte) interface{} { return health(string(script), line) }
	} else {
		codes := []*gojq.Code{}
		for _, expression := range os.Args[2:] {
			query, err := gojq.Parse(fmt.Sprintf("del(%s)", expression))
			if err != nil {
				fail(err)
			}
			code, err := gojq.Compile(query)
			if err != nil {
				fail(err)
			}
			codes = append(codes, code)
		}
		each = func(line []byte) interface{} { return ignore(codes, line) }
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		line := in.Bytes()
		if len(line) == 0 {
			continue
		}
		if err := out.Encode(each(line)); err != nil {
			fail(err)
		}
	}
	if err := in.Err(); err != nil {
		fail(err)
	}
}
