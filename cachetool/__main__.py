"""`python -m cachetool` runs the command line."""

from cachetool.cli.app import main

if __name__ == "__main__":
    main()
