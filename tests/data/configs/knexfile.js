  module.exports = {
    production: {
      client: 'pg',
      connection: {
        user: 'knex',
C       password: '«knex-pw»',
N       password: process.env.DB_PASSWORD,
      },
    },
  };
C const apiKey = "«js-api-key-0042»";
N const token = await getToken();
N const { password } = req.body;
