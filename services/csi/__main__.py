from services.csi.server import main

main()
