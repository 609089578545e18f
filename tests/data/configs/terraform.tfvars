  region      = "eu-west-1"
C db_password = "«tf-db-pw»"
C api_token   = "«tf-api-token-321»"
N db_password = var.db_password
N kms_key_id  = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
