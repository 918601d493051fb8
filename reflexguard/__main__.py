from reflexguard.cli import main

main()
