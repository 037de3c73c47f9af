from klog.cli.app import main

main()
