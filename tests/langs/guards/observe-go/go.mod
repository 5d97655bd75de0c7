module toolgate.dev/tests/langs/guards/observe-go

go 1.27

require toolgate.dev/guest v0.0.0

replace toolgate.dev/guest => ../../../../guest-sdk/go
