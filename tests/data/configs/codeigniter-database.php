  <?php
  $db['default']['hostname'] = 'localhost';
  $db['default']['username'] = 'ci';
C $db['default']['password'] = '«ci-db»';
C $config['encryption_key'] = '«ci-encryption-key-1234»';
N $db['default']['password'] = $_ENV['DB_PASS'];
