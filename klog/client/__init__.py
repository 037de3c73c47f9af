"""klog/client: the Python API (Store, Producer, Consumer); the CLI is a thin face over it."""
