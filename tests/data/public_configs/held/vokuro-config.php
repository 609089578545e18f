  <?php
  declare(strict_types=1);
  
  /**
   * This file is part of the Vökuró.
   *
   * (c) Phalcon Team <team@phalcon.io>
   *
   * For the full copyright and license information, please view
   * the LICENSE file that was distributed with this source code.
   */
  
  use Phalcon\Logger\Logger;
  use function Vokuro\root_path;
  
  return [
      'database' => [
          'adapter' => getenv('DB_ADAPTER'),
          'host' => getenv('DB_HOST'),
N         'username' => getenv('DB_USERNAME'),
N         'password' => getenv('DB_PASSWORD'),
          'dbname' => getenv('DB_NAME'),
      ],
      'application' => [
          'baseUri' => getenv('APP_BASE_URI'),
          'publicUrl' => getenv('APP_PUBLIC_URL'),
N         'cryptSalt' => getenv('APP_CRYPT_SALT'),
          'viewsDir' => root_path('themes/vokuro/'),
          'cacheDir' => root_path('var/cache/'),
          'sessionSavePath' => root_path('var/cache/session/'),
      ],
      'mail' => [
          'fromName' => getenv('MAIL_FROM_NAME'),
          'fromEmail' => getenv('MAIL_FROM_EMAIL'),
          'smtp' => [
              'server' => getenv('MAIL_SMTP_SERVER'),
              'port' => getenv('MAIL_SMTP_PORT'),
              'security' => getenv('MAIL_SMTP_SECURITY'),
N             'username' => getenv('MAIL_SMTP_USERNAME'),
N             'password' => getenv('MAIL_SMTP_PASSWORD'),
          ]
      ],
      'amazon' => [
N         'AWSAccessKeyId' => 'AKIAQ7EXAMPLEV0KR2MD',
C         'AWSSecretKey' => '«hR4k9Vq2LmTz7Xw0bN3cPe8sJf1GyUa6Dd5Ki+Wo»',
      ],
      'logger' => [
          'path' => root_path('var/logs/'),
          'format' => '%date% [%type%] %message%',
          'date' => 'D j H:i:s',
          'logLevel' => Logger::DEBUG,
          'filename' => 'application.log',
      ],
      // Set to false to disable sending emails (for use in test environment)
      'useMail' => true,
  ];
