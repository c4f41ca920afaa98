"""`python -m cachetool` runs the command line."""

from cachetool.cli.entry import main

if __name__ == "__main__":
    main()
