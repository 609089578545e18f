  <?php
  
  return
  [
      'paths' => [
          'migrations' => '%%PHINX_CONFIG_DIR%%/db/migrations',
          'seeds' => '%%PHINX_CONFIG_DIR%%/db/seeds'
      ],
      'environments' => [
          'default_migration_table' => 'phinxlog',
          'default_environment' => 'development',
          'production' => [
              'adapter' => 'mysql',
              'host' => 'localhost',
              'name' => 'production_db',
              'user' => 'root',
C             'pass' => '«Mx7!pHinx-Prod-2611»',
              'port' => '3306',
              'charset' => 'utf8',
          ],
          'development' => [
              'adapter' => 'mysql',
              'host' => 'localhost',
              'name' => 'development_db',
              'user' => 'root',
N             'pass' => getenv('PHINX_DEV_DB_PASS'),
              'port' => '3306',
              'charset' => 'utf8',
          ],
          'testing' => [
C             'dsn' => 'mysql://ci_runner:«t3st-Q9vLw2xKz»@127.0.0.1:3306/testing_db',
              'adapter' => 'mysql',
              'host' => 'localhost',
              'name' => 'testing_db',
              'user' => 'root',
N             'pass' => '%%PHINX_DBPASS%%',
              'port' => '3306',
              'charset' => 'utf8',
          ]
      ],
      'version_order' => 'creation'
  ];
