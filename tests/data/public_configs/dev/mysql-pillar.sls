  # -*- coding: utf-8 -*-
  # vim: ft=yaml
  ---
  mysql:
    global:
      client-server:
        default_character_set: utf8
  
    clients:
      mysql:
        default_character_set: utf8
      mysqldump:
        default_character_set: utf8
  
    library:
      client:
        default_character_set: utf8
  
    server:
      # Use this account for database admin (defaults to root)
N     root_user: 'admin'
N     # root_password: '' - to have root@localhost without password
C     root_password: '«Bramble&Thistle_81»'
C     root_password_hash: '«*DB024244E2FCBB42DE26E00D1688F3D3C020AE67»'
      user: mysql
      # If you only manage the dbs and users and the server is on
      # another host
      host: 123.123.123.123
      # my.cnf sections changes
      mysqld:
        # you can use either underscore or hyphen in param names
        bind-address: 0.0.0.0
        log_bin: /var/log/mysql/mysql-bin.log
        datadir: /var/lib/mysql
        port: 3307
        binlog_do_db: foo
        auto_increment_increment: 5
        binlog-ignore-db:
          - mysql
          - sys
          - information_schema
          - performance_schema
        explicit_defaults_for_timestamp: 1   # strict ansi supports sane defaults
      mysql:
        # my.cnf param that not require value
        no-auto-rehash: noarg_present
  
    salt_user:
N     salt_user_name: 'salt'
C     salt_user_password: '«s4lt-M1nion-Qv7»'
      grants:
        - 'all privileges'
  
    # Manage config
    config:
      file: ~/.my.cnf
      sections:
        client:
          port: 33306
          socket: /var/lib/mysql-socket/mysql.sock
        mysqld_safe:
          plugin-dir: '~/mysql/plugins'
        mysqld:
          user: myself
          port: 33306
          datadir: ~/mysql/datadir
      apparmor:
        dir: /etc/apparmor.d/local
        file: usr.sbin.mysqld
  
    # Manage databases
    database:
      # Simple definition using default charset and collate
      - foo
      # Detailed definition
      - name: bar
        character_set: utf8
        collate: utf8_general_ci
      # Delete DB
      - name: obsolete_db
        present: false
    schema:
      foo:
        load: true
        source: salt://{{ tpldir }}/files/foo.schema
      bar:
        load: false
      baz:
        load: true
        source: salt://{{ tpldir }}/files/baz.schema.tmpl
        template: jinja
      qux:
        load: true
        source: salt://{{ tpldir }}/files/qux.schema.tmpl
        template: jinja
        context:
          encabulator: Turbo
          girdlespring: differential
      quux:
        load: true
        source: salt://{{ tpldir }}/files/qux.schema.tmpl
        template: jinja
        context:
          encabulator: Retro
          girdlespring: integral
  
    # Manage users
    # you can get pillar for existing server using scripts/import_users.py script
    user:
      frank:
C       password: '«frank0nline»'
        host: localhost
        databases:
          - database: foo
            grants: ['select', 'insert', 'update']
            escape: true
          - database: bar
            grants: ['all privileges']
      bob:
C       password_hash: '«*DE5A5B05C431BEB653A378E390112080FFD60236»'
