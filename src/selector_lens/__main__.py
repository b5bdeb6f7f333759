from selector_lens.cli import main

main()
