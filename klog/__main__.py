from klog.cli.entry import main

main()
