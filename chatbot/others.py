"""What customers name that is not Nimbus's: other companies' products, kinds of software Nimbus does not make, and
platforms Nimbus has no app for.

A question about one of them that the help centre never names is not answered by the nearest Nimbus answer
(chatbot/relevance.py `unknown_product`).
"""

# Other storage and sharing services customers name: a question about one of them that the help centre never
# names is about another company's product. Tools customers mention in passing ("my gmail", "on my iPhone") are
# words like any other.
PRODUCTS = ("dropbox", "google drive", "onedrive", "icloud", "box.com", "sharepoint", "wetransfer", "mega.nz",
            "pcloud", "sync.com", "tresorit", "idrive", "backblaze", "mediafire", "time machine", "carbonite",
            "crashplan", "acronis")
# Kinds of software Nimbus does not make: asked whether Nimbus has one, the nearest answer is about another thing
# with the same first word ("does nimbus have a password manager built in" got the password-reset steps). Named
# in passing ("my password manager got wiped", "one of us is a video editor") they are words like any other.
TOOLS = ("password manager", "vpn", "antivirus", "anti virus", "virus scanner", "photo editor", "video editor",
         "pdf editor", "email client", "mail client")
# Devices and platforms an app could run on: one the help centre never names is one it has no app for, and the
# nearest answer (the phone app's, the desktop install steps) would say yes ("is there a nimbus app for my samsung
# smart tv", "can i install the sync app on my synology nas").
PLATFORMS = ("smart tv", "apple tv", "android tv", "fire tv", "fire stick", "firestick", "roku", "chromecast",
             "xbox", "playstation", "nintendo", "kindle", "apple watch", "smartwatch", "wear os", "chromebook",
             "chrome os", "chromeos", "blackberry", "windows phone", "carplay", "android auto", "nas", "synology",
             "qnap", "truenas", "unraid", "raspberry pi")
