  <?php
  
  return [
      'container' => [
          'singletons' => [
              \yii\mail\MailerInterface::class => [
                  'class' => \yii\symfonymailer\Mailer::class,
                  'viewPath' => '@common/mail',
                  // send all mails to a file by default.
                  'useFileTransport' => false,
                  // You have to set
                  //
                  // 'useFileTransport' => false,
                  //
                  // and configure a transport for the mailer to send real emails.
                  //
                  // SMTP server example:
                      'transport' => [
                          'scheme' => 'smtps',
                          'host' => 'smtp.mailgun.org',
N                         'username' => 'postmaster@mg.shop-example.net',
C                         'password' => '«4f0c1e7b9a23d58e6b1c0f92a7d4e3b5-2af183c7-91be04d6»',
                          'port' => 465,
                          'dsn' => 'native://default',
                      ],
                  //
                  // DSN example:
                  //    'transport' => [
N                 //        'dsn' => 'smtp://user:pass@smtp.example.com:25',
                  //    ],
                  //
                  // See: https://symfony.com/doc/current/mailer.html#using-built-in-transports
                  // Or if you use a 3rd party service, see:
                  // https://symfony.com/doc/current/mailer.html#using-a-3rd-party-transport
              ],
          ],
      ],
      'components' => [
          'db' => [
              'class' => \yii\db\Connection::class,
              'dsn' => 'mysql:host=localhost;dbname=yii2advanced',
N             'username' => 'root',
C             'password' => '«correcthorsebatterystaple»',
              'charset' => 'utf8',
          ],
          'mailer' => \yii\mail\MailerInterface::class,
      ],
  ];
