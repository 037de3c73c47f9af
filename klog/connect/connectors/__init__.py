"""klog's own connectors (imported only when a config names one)."""
