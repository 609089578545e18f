  <?php
  /*
   * Local configuration file to provide any overrides to your app.php configuration.
   * Copy and save this file as app_local.php and make changes as required.
N  * Note: It is not recommended to commit files with credentials such as app_local.php
   * into source code version control.
   */
  return [
      /*
       * Debug Level:
       *
       * Production Mode:
       * false: No error messages, errors, or warnings shown.
       *
       * Development Mode:
       * true: Errors and warnings shown.
       */
      'debug' => filter_var(env('DEBUG', true), FILTER_VALIDATE_BOOLEAN),
  
      /*
       * Security and encryption configuration
       *
       * - salt - A random string used in security hashing methods.
N      *   The salt value is also used as the encryption key.
       *   You should treat it as extremely sensitive data.
       */
      'Security' => [
C         'salt' => env('SECURITY_SALT', '«b1f4e7c2a98d3065f2ce71ab4d90e5c83a6f27d1e4b05c9a8d3f16e2c7a0b94f»'),
      ],
  
      /*
       * Connection information used by the ORM to connect
       * to your application's datastores.
       *
       * See app.php for more configuration options.
       */
      'Datasources' => [
          'default' => [
              'host' => 'localhost',
              /*
               * CakePHP will use the default DB port based on the driver selected
               * MySQL on MAMP uses port 8889, MAMP users will want to uncomment
               * the following line and set the port accordingly
               */
              //'port' => 'non_standard_port_number',
  
N             'username' => 'my_app',
C             'password' => '«Quokka-Marmalade-42»',
  
              'database' => 'my_app',
              /*
               * If not using the default 'public' schema with the PostgreSQL driver
               * set it here.
               */
              //'schema' => 'myapp',
  
              /*
               * You can use a DSN string to set the entire configuration
               */
N             'url' => env('DATABASE_URL', null),
          ],
  
          /*
           * The test connection is used during the test suite.
           */
          'test' => [
              'host' => 'localhost',
              //'port' => 'non_standard_port_number',
N             'username' => 'my_app',
C             'password' => '«t3st-only-9wQx»',
              'database' => 'test_myapp',
              //'schema' => 'myapp',
              'url' => env('DATABASE_TEST_URL', 'sqlite://127.0.0.1/tmp/tests.sqlite'),
          ],
      ],
  
      /*
       * Email configuration.
       *
N      * Host and credential configuration in case you are using SmtpTransport
       *
       * See app.php for more configuration options.
       */
      'EmailTransport' => [
          'default' => [
              'host' => 'localhost',
              'port' => 25,
N             'username' => 'mailer@my-app.example',
C             'password' => '«Zx8$kL2#pQ7m»',
              'client' => null,
N             'url' => env('EMAIL_TRANSPORT_DEFAULT_URL', null),
          ],
      ],
  ];
