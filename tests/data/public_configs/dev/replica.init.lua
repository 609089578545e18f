  box.cfg{
      listen = 3302,
C     replication = {'replicator:«Vole-Cistern-5290»@127.0.0.1:3301',
C                     'replicator:«Vole-Cistern-5290»@127.0.0.1:3302'},
      read_only = true
  }
  
  box.once("schema", function()
C     box.schema.user.create('replicator', {password = '«Vole-Cistern-5290»'})
N     box.schema.user.grant('replicator', 'replication')
      box.schema.space.create("example")
      box.space.example:create_index("primary")
      print('box.once executed on replica')
  end)
