from sweeps.cli import main

main()
