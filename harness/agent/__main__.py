from stratus.harness.agent._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
