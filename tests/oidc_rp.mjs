// A relying party built with panva's openid-client v6 (OpenID-certified), used as its README says,
// with its defaults. tests/test_oidc_openid_client.py drives it in two steps around the browser:
//
//   node oidc_rp.mjs start  '{"issuer", "clientId", "clientSecret", "redirectUri", "scope", "withNonce"}'
//     -> {"url", "codeVerifier", "state", "nonce", "supportsPKCE"}        (the authorization URL)
//   node oidc_rp.mjs finish '{... , "callbackUrl", "codeVerifier", "state", "nonce", "postLogoutRedirectUri"}'
//     -> {"tokens", "claims", "userinfo", "refreshed", "refreshedClaims", "endSessionUrl"}
//
// The issuer is HTTPS with a test CA that Node trusts through NODE_EXTRA_CA_CERTS: nothing here turns on
// allowInsecureRequests. Any failure is printed as {"error", "code", "cause"} with exit status 1.
import * as client from 'openid-client'

const [step, argument] = process.argv.slice(2)
const input = JSON.parse(argument)

async function configuration () {
  // discovery(issuer, client_id, client_secret): client_secret_post, the library's default.
  return client.discovery(new URL(input.issuer), input.clientId, input.clientSecret)
}

async function start () {
  const config = await configuration()
  // The README quick start, verbatim in substance.
  const codeVerifier = client.randomPKCECodeVerifier()
  const codeChallenge = await client.calculatePKCECodeChallenge(codeVerifier)
  let state
  let nonce
  const parameters = {
    redirect_uri: input.redirectUri,
    scope: input.scope,
    code_challenge: codeChallenge,
    code_challenge_method: 'S256'
  }
  const supportsPKCE = config.serverMetadata().supportsPKCE()
  if (!supportsPKCE) {
    state = client.randomState()
    parameters.state = state
  }
  if (input.withNonce) { // the second run: nonce and state as well
    nonce = client.randomNonce()
    state = client.randomState()
    parameters.nonce = nonce
    parameters.state = state
  }
  const url = client.buildAuthorizationUrl(config, parameters)
  return { url: url.href, codeVerifier, state: state ?? null, nonce: nonce ?? null, supportsPKCE }
}

async function finish () {
  const config = await configuration()
  const tokens = await client.authorizationCodeGrant(config, new URL(input.callbackUrl), {
    pkceCodeVerifier: input.codeVerifier,
    expectedState: input.state ?? undefined,
    expectedNonce: input.nonce ?? undefined,
    idTokenExpected: true
  })
  const claims = tokens.claims()
  const userinfo = await client.fetchUserInfo(config, tokens.access_token, claims.sub)
  const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token)
  const refreshedClaims = refreshed.claims()
  const endSessionUrl = client.buildEndSessionUrl(config, {
    id_token_hint: tokens.id_token,
    post_logout_redirect_uri: input.postLogoutRedirectUri,
    state: 'bye-123'
  })
  return {
    tokens: { ...tokens },
    claims,
    userinfo,
    refreshed: { ...refreshed },
    refreshedClaims,
    endSessionUrl: endSessionUrl.href
  }
}

try {
  const result = step === 'start' ? await start() : await finish()
  process.stdout.write(JSON.stringify(result))
} catch (error) {
  process.stdout.write(JSON.stringify({
    error: String(error?.message ?? error),
    code: error?.code ?? null,
    cause: error?.cause ? String(error.cause?.message ?? error.cause) : null,
    body: error?.error ? { error: error.error, error_description: error.error_description } : null
  }))
  process.exit(1)
}
