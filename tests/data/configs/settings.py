  import os
C SECRET_KEY = 'django-insecure-«k2#9x!m@q5z&r8v^t1w$y3b*n6c%j0l»'
  DATABASES = {
      'default': {
          'ENGINE': 'django.db.backends.postgresql',
          'USER': 'django',
C         'PASSWORD': '«djangopw»',
          'HOST': 'db',
      }
  }
C EMAIL_HOST_PASSWORD = "«mailpw42»"
N SECRET_KEY_FALLBACKS = []
N AWS_SECRET_ACCESS_KEY = os.environ["AWS_SECRET_ACCESS_KEY"]
N EMAIL_HOST_PASSWORD = os.getenv("EMAIL_HOST_PASSWORD", "")
N AUTH_PASSWORD_VALIDATORS = [
N     {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
  ]
