C c.ServerApp.token = '«jupyter-token-abc123»'
C c.ServerApp.password = '«argon2:$argon2id$v=19$m=10240,t=10,p=8$abc$def»'
N c.ServerApp.certfile = '/etc/jupyter/cert.pem'
N c.ServerApp.keyfile = '/etc/jupyter/key.pem'
