C {#"blueant" {:password "«Archiva-Pelican-71»"}
   #"https://repo.clojars.org"
C  {:username "milgrim" :password "«CLOJARS_dbdd643686885150524b48f67d6469e6de9f0daaa1e4a4d7fcc407637356»"}
   "s3p://s3-repo-bucket/releases"
C  {:username "AKIAQ3EXAMPLEX7PLM2W" :passphrase "«FRxq/nkAXxz3s6iTy0F9XQ5/MV0br2LWQJVvGIag»"}}
