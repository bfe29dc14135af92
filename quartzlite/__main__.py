from quartzlite.cli import main

main()
