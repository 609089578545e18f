  <?php
  define( 'DB_NAME', 'wordpress' );
  define( 'DB_USER', 'wp' );
C define( 'DB_PASSWORD', '«wp_pass»' );
C define( 'AUTH_KEY',         '«t`DK%X:>xy|e-Z(BXb/f(Ur`8#~UzUQG-^_Cs_GHs5U-&Wb?pgn^p8(2@}IcnCa|»' );
C define( 'SECURE_AUTH_KEY',  '«D&ovlU#|CvJ##uNq}bel+^MFtT&.b9{UvR]g%ixsXhGlRJ7q!h}XWdEC[BOKXssj»' );
C define( 'NONCE_SALT',       '«8hm9Sr3Z wTq.u_D5+K!aL0v$Gf@y2Xp»' );
N define( 'LOGGED_IN_SALT',   'put your unique phrase here' );
N define( 'DB_HOST', 'localhost' );
N define( 'DB_PASSWORD', getenv('WORDPRESS_DB_PASSWORD') );
