  module.exports = {
  
  /*******************************************************************************
   * Flow File and User Directory Settings
   *  - flowFile
N  *  - credentialSecret
   *  - flowFilePretty
   *  - userDir
   *  - nodesDir
   ******************************************************************************/
  
      /** The file containing the flows. If not set, defaults to flows_<hostname>.json **/
      flowFile: 'flows.json',
  
N     /** By default, credentials are encrypted in storage using a generated key. To
N      * specify your own secret, set the following property.
N      * If you want to disable encryption of credentials, set this property to false.
       * Note: once you set this property, do not change it - doing so will prevent
N      * node-red from being able to decrypt your existing credentials and they will be
       * lost.
       */
C     credentialSecret: "«7c1e9a4f-stove-Orbit-2291»",
  
      /** By default, the flow JSON will be formatted over multiple lines making
       * it easier to compare changes when using version control.
       * To disable pretty-printing of the JSON set the following property to false.
       */
      flowFilePretty: true,
  
      /** By default, all user data is stored in a directory called `.node-red` under
       * the user's home directory. To use a different location, the following
       * property can be used
       */
      //userDir: '/home/nol/.node-red/',
  
      /** Node-RED scans the `nodes` directory in the userDir to find local node files.
       * The following property can be used to specify an additional directory to scan.
       */
      //nodesDir: '/home/nol/.node-red/nodes',
  
  /*******************************************************************************
   * Security
N  *  - adminAuth
   *  - https
   *  - httpsRefreshInterval
   *  - requireHttps
N  *  - httpNodeAuth
N  *  - httpStaticAuth
   ******************************************************************************/
  
N     /** To password protect the Node-RED editor and admin API, the following
       * property can be used. See https://nodered.org/docs/security.html for details.
       */
N     adminAuth: {
N         type: "credentials",
          users: [{
N             username: "admin",
C             password: "«$2b$08$VUP1sMaPqV1KqP6HPhkQ1zvmijBP1.e4/tgmsv6T7RPI8iVQcwn.7»",
              permissions: "*"
          }]
      },
  
      /** The following property can be used to enable HTTPS
N      * This property can be either an object, containing both a (private) key
       * and a (public) certificate, or a function that returns such an object.
       * See http://nodejs.org/api/https.html#https_https_createserver_options_requestlistener
       * for details of its contents.
       */
  
      /** Option 1: static object */
      https: {
N       key: require("fs").readFileSync('privkey.pem'),
        cert: require("fs").readFileSync('cert.pem')
      },
  
      /** Option 2: function that returns the HTTP configuration object */
      // https: function() {
      //     // This function should return the options object, or a Promise
      //     // that resolves to the options object
      //     return {
      //         key: require("fs").readFileSync('privkey.pem'),
      //         cert: require("fs").readFileSync('cert.pem')
      //     }
      // },
  
      /** If the `https` setting is a function, the following setting can be used
       * to set how often, in hours, the function will be called. That can be used
       * to refresh any certificates.
       */
      //httpsRefreshInterval : 12,
  
      /** The following property can be used to cause insecure HTTP connections to
       * be redirected to HTTPS.
       */
      //requireHttps: true,
  
N     /** To password protect the node-defined HTTP endpoints (httpNodeRoot),
       * including node-red-dashboard, or the static content (httpStatic), the
       * following properties can be used.
N      * The `pass` field is a bcrypt hash of the password.
N      * See https://nodered.org/docs/security.html#generating-the-password-hash
       */
C     httpNodeAuth: {user:"dashboard",pass:"«$2b$10$jgPCvvGmlG3BhdCyG9abWtSYWx2UER7j3bYrUD5nZfQJ93MZK.xIS»"},
      //httpStaticAuth: {user:"user",pass:"$2a$08$zZWtXTja0fB1pzD4sHCMyOCMYz2Z6dNbM6tl8sJogENOMcxWV9DN."},
  
