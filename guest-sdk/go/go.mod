module toolgate.dev/guest

go 1.27
