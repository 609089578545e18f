  #########################
  #                       #
  #   Required settings   #
  #                       #
  #########################
  
  # This is a list of valid fully-qualified domain names (FQDNs) for the NetBox server. NetBox will not permit write
  # access to the server via any other hostnames. The first FQDN in the list will be treated as the preferred name.
  #
  # Example: ALLOWED_HOSTS = ['netbox.example.com', 'netbox.internal.local']
  ALLOWED_HOSTS = ['netbox.corp.example.net']
  
  # PostgreSQL database configuration. See the Django documentation for a complete list of available parameters:
  #   https://docs.djangoproject.com/en/stable/ref/settings/#databases
  DATABASES = {
      'default': {
          'ENGINE': 'django.db.backends.postgresql',  # Database engine
          'NAME': 'netbox',         # Database name
N         'USER': 'netbox',         # PostgreSQL username
C         'PASSWORD': '«J7v!pQ2#netbox-db»',           # PostgreSQL password
          'HOST': 'localhost',      # Database server
          'PORT': '',               # Database port (leave blank for default)
          'CONN_MAX_AGE': 300,      # Max database connection age
      }
  }
  
  # Redis database settings. Redis is used for caching and for queuing background tasks such as webhook events. A separate
  # configuration exists for each. Full connection details are required in both sections, and it is strongly recommended
  # to use two separate database IDs.
  REDIS = {
      'tasks': {
          'HOST': 'localhost',
          'PORT': 6379,
          # Comment out `HOST` and `PORT` lines and uncomment the following if using Redis Sentinel
          # 'SENTINELS': [('mysentinel.redis.example.com', 6379)],
          # 'SENTINEL_SERVICE': 'netbox',
          'USERNAME': '',
C         'PASSWORD': '«rEd1s-T4sks-9x2LmQ»',
          'DATABASE': 0,
          'SSL': False,
          # Set this to True to skip TLS certificate verification
          # This can expose the connection to attacks, be careful
          # 'INSECURE_SKIP_TLS_VERIFY': False,
          # Set a path to a certificate authority, typically used with a self signed certificate.
          # 'CA_CERT_PATH': '/etc/ssl/certs/ca.crt',
      },
      'caching': {
          'HOST': 'localhost',
          'PORT': 6379,
          # Comment out `HOST` and `PORT` lines and uncomment the following if using Redis Sentinel
          # 'SENTINELS': [('mysentinel.redis.example.com', 6379)],
          # 'SENTINEL_SERVICE': 'netbox',
          'USERNAME': '',
C         'PASSWORD': '«Cach3-Qw8zVn5KpR»',
          'DATABASE': 1,
          'SSL': False,
          # Set this to True to skip TLS certificate verification
          # This can expose the connection to attacks, be careful
          # 'INSECURE_SKIP_TLS_VERIFY': False,
          # Set a path to a certificate authority, typically used with a self signed certificate.
          # 'CA_CERT_PATH': '/etc/ssl/certs/ca.crt',
      }
  }
  
  # This key is used for secure generation of random numbers and strings. It must never be exposed outside of this file.
N # For optimal security, SECRET_KEY should be at least 50 characters in length and contain a mix of letters, numbers, and
  # symbols. NetBox will not run without this defined. For more information, see
  # https://docs.djangoproject.com/en/stable/ref/settings/#std:setting-SECRET_KEY
C SECRET_KEY = '«x3$Lq9v^Rk2!pW7zTm#8bNc@4hYf%6sJd*1gKa&5uE0oZiV-Bt»'
  
  # Define a mapping of cryptographic peppers to use when hashing API tokens. A minimum of one pepper is required to
  # enable v2 API tokens (NetBox v4.5+). Define peppers as a mapping of numeric ID to pepper value, as shown below. Each
N # pepper must be at least 50 characters in length.
  #
  #     API_TOKEN_PEPPERS = {
N #         1: "<random string>",
N #         2: "<random string>",
  #     }
C API_TOKEN_PEPPERS = {1: "«Wn4Hs8Qk1Ld6Fz3Rp9Vt2Mx7Cb5Jy0Ga8Eu4Ko1Pi6Sr3Tw9Ne»"}
  
