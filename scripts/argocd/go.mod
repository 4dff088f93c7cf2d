module setpoint.dev/tools/argocd

go 1.26

require (
	github.com/itchyny/gojq v0.12.17
	github.com/yuin/gopher-lua v1.1.2
)

require github.com/itchyny/timefmt-go v0.1.6 // indirect
