  class Config:
C     SECRET_KEY = "«flask-dev-key»"
C     MAIL_PASSWORD = '«flaskmail»'
N     SQLALCHEMY_DATABASE_URI = os.environ.get("DATABASE_URL")
  class ProdConfig(Config):
N     SECRET_KEY = os.environ["SECRET_KEY"]
N     JWT_PUBLIC_KEY = open("keys/jwt.pub").read()
