"""klog/security: SCRAM, ACLs and quotas as pure logic (no sockets); `klog serve` applies them."""
