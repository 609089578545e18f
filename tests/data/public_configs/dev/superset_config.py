  #
  # This file is included in the final Docker image and SHOULD be overridden when
  # deploying the image to prod. Settings configured here are intended for use in local
  # development environments. Also note that superset_config_docker.py is imported
  # as a final step as a means to override "defaults" configured here
  #
  import logging
  import os
  
  from celery.schedules import crontab
  from flask_caching.backends.filesystemcache import FileSystemCache
  
  logger = logging.getLogger()
  
  DATABASE_DIALECT = os.getenv("DATABASE_DIALECT")
N DATABASE_USER = os.getenv("DATABASE_USER")
C DATABASE_PASSWORD = os.getenv("DATABASE_PASSWORD", "«Sup3rset-Pg-6tR4wq»")
  DATABASE_HOST = os.getenv("DATABASE_HOST")
  DATABASE_PORT = os.getenv("DATABASE_PORT")
  DATABASE_DB = os.getenv("DATABASE_DB")
  
N EXAMPLES_USER = os.getenv("EXAMPLES_USER")
N EXAMPLES_PASSWORD = os.getenv("EXAMPLES_PASSWORD")
  EXAMPLES_HOST = os.getenv("EXAMPLES_HOST")
  EXAMPLES_PORT = os.getenv("EXAMPLES_PORT")
  EXAMPLES_DB = os.getenv("EXAMPLES_DB")
  
  # The SQLAlchemy connection string.
  SQLALCHEMY_DATABASE_URI = (
      f"{DATABASE_DIALECT}://"
N     f"{DATABASE_USER}:{DATABASE_PASSWORD}@"
      f"{DATABASE_HOST}:{DATABASE_PORT}/{DATABASE_DB}"
  )
  # SQLALCHEMY_DATABASE_URI = "mysql://superset:superset@host.docker.internal:3306/superset"
  # SQLALCHEMY_EXAMPLES_URI = "mysql://superset:superset@host.docker.internal:3306/superset"
  
  SQLALCHEMY_EXAMPLES_URI = (
      f"{DATABASE_DIALECT}://"
N     f"{EXAMPLES_USER}:{EXAMPLES_PASSWORD}@"
      f"{EXAMPLES_HOST}:{EXAMPLES_PORT}/{EXAMPLES_DB}"
  )
  
  REDIS_HOST = os.getenv("REDIS_HOST", "redis")
  REDIS_PORT = os.getenv("REDIS_PORT", "6379")
  REDIS_CELERY_DB = os.getenv("REDIS_CELERY_DB", "0")
  REDIS_RESULTS_DB = os.getenv("REDIS_RESULTS_DB", "1")
  
  RESULTS_BACKEND = FileSystemCache("/app/superset_home/sqllab")
  
  CACHE_CONFIG = {
      "CACHE_TYPE": "RedisCache",
      "CACHE_DEFAULT_TIMEOUT": 300,
N     "CACHE_KEY_PREFIX": "superset_",
      "CACHE_REDIS_HOST": REDIS_HOST,
      "CACHE_REDIS_PORT": REDIS_PORT,
      "CACHE_REDIS_DB": REDIS_RESULTS_DB,
  }
  DATA_CACHE_CONFIG = CACHE_CONFIG
  
  
  class CeleryConfig:
C     broker_url = f"redis://:«ab12d1ef64577f11f772f06e736c2c8b»@{REDIS_HOST}:{REDIS_PORT}/{REDIS_CELERY_DB}"
      imports = ("superset.sql_lab",)
C     result_backend = f"redis://:«ab12d1ef64577f11f772f06e736c2c8b»@{REDIS_HOST}:{REDIS_PORT}/{REDIS_RESULTS_DB}"
      worker_prefetch_multiplier = 1
      task_acks_late = False
      beat_schedule = {
          "reports.scheduler": {
              "task": "reports.scheduler",
              "schedule": crontab(minute="*", hour="*"),
          },
          "reports.prune_log": {
              "task": "reports.prune_log",
              "schedule": crontab(minute=10, hour=0),
          },
      }
  
  
  CELERY_CONFIG = CeleryConfig
  
  FEATURE_FLAGS = {"ALERT_REPORTS": True}
  ALERT_REPORTS_NOTIFICATION_DRY_RUN = True
  WEBDRIVER_BASEURL = "http://superset:8088/"
  # The base URL for the email report hyperlinks.
  WEBDRIVER_BASEURL_USER_FRIENDLY = WEBDRIVER_BASEURL
  
  SQLLAB_CTAS_NO_LIMIT = True
  
  #
  # Optionally import superset_config_docker.py (which will have been included on
  # the PYTHONPATH) in order to allow for local settings to be overridden
  #
  try:
      import superset_config_docker
      from superset_config_docker import *  # noqa
  
      logger.info(
          f"Loaded your Docker configuration at " f"[{superset_config_docker.__file__}]"
      )
  except ImportError:
      logger.info("Using default Docker config...")
