module toolgate.dev/plugins/go/token-budget

go 1.27

require toolgate.dev/guest v0.0.0

replace toolgate.dev/guest => ../../../guest-sdk/go
