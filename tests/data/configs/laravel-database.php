  <?php
  return [
      'connections' => [
          'mysql' => [
              'username' => env('DB_USERNAME', 'forge'),
C             'password' => '«forge-secret»',
N             'password' => env('DB_PASSWORD', ''),
          ],
          'redis' => [
C             "password" => "«redispw»",
          ],
      ],
  ];
