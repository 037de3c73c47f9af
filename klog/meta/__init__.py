"""klog/meta: metadata in LMDB (topics, consumer groups, committed offsets)."""
