package nofile

func limit() (soft, hard uint64)
