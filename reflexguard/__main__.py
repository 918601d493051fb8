from reflexguard.cli.main import main

main()
