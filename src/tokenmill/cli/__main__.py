from tokenmill.cli import main

main()
