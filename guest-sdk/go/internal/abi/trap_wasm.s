// Copyright toolgate authors. Licensed under Apache-2.0.

#include "textflag.h"

// func trap()
TEXT ·trap(SB), NOSPLIT, $0-0
	UNDEF
