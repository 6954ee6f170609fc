// A client built with panva's openid-client v6, using pushed authorization requests (RFC 9126) and
// DPoP (RFC 9449) as its README shows. tests/test_par_dpop_openid_client.py drives it in two steps
// around the browser:
//
//   node par_dpop_rp.mjs start  '{"issuer", "clientId", "clientSecret", "redirectUri", "scope"}'
//     -> {"url", "codeVerifier", "state", "privateJwk", "publicJwk"}    (the URL after the push)
//   node par_dpop_rp.mjs finish '{... , "callbackUrl", "codeVerifier", "state", "privateJwk",
//                                 "publicJwk", "resourceUrl"}'
//     -> {"tokens", "refreshed", "userinfo", "resource": {"status", "body"}}
//   node par_dpop_rp.mjs device '{"issuer", "clientId", "clientSecret", "scope"}'
//     -> one line {"device": <the device authorization response>}, then, once the user approved
//        and its polling got them, {"tokens", "publicJwk", "userinfo"}
//
// The DPoP key pair is made by openid-client and carried from one step to the other as JWKs. The
// issuer and the resource are HTTPS with a test CA that Node trusts through NODE_EXTRA_CA_CERTS.
// Any failure is printed as {"error", "code", "cause"} with exit status 1.
import * as client from 'openid-client'

const [step, argument] = process.argv.slice(2)
const input = JSON.parse(argument)

async function configuration () {
  return client.discovery(new URL(input.issuer), input.clientId, input.clientSecret)
}

async function keyPair () {
  const algorithm = { name: 'ECDSA', namedCurve: 'P-256' }
  return {
    privateKey: await crypto.subtle.importKey('jwk', input.privateJwk, algorithm, false, ['sign']),
    publicKey: await crypto.subtle.importKey('jwk', input.publicJwk, algorithm, true, ['verify'])
  }
}

async function start () {
  const config = await configuration()
  const pair = await client.randomDPoPKeyPair('ES256', { extractable: true })
  const DPoP = client.getDPoPHandle(config, pair)
  const codeVerifier = client.randomPKCECodeVerifier()
  const state = client.randomState()
  const url = await client.buildAuthorizationUrlWithPAR(config, {
    redirect_uri: input.redirectUri,
    scope: input.scope,
    code_challenge: await client.calculatePKCECodeChallenge(codeVerifier),
    code_challenge_method: 'S256',
    state
  }, { DPoP })
  return {
    url: url.href,
    codeVerifier,
    state,
    privateJwk: await crypto.subtle.exportKey('jwk', pair.privateKey),
    publicJwk: await crypto.subtle.exportKey('jwk', pair.publicKey)
  }
}

async function finish () {
  const config = await configuration()
  const DPoP = client.getDPoPHandle(config, await keyPair())
  const tokens = await client.authorizationCodeGrant(config, new URL(input.callbackUrl), {
    pkceCodeVerifier: input.codeVerifier,
    expectedState: input.state
  }, undefined, { DPoP })
  const refreshed = await client.refreshTokenGrant(config, tokens.refresh_token, undefined, { DPoP })
  const userinfo = await client.fetchUserInfo(config, refreshed.access_token, client.skipSubjectCheck, { DPoP })
  const response = await client.fetchProtectedResource(config, refreshed.access_token, new URL(input.resourceUrl),
    'GET', undefined, undefined, { DPoP })
  return {
    tokens: { ...tokens },
    refreshed: { ...refreshed },
    userinfo,
    resource: { status: response.status, body: await response.json() }
  }
}

async function device () {
  const config = await configuration()
  const pair = await client.randomDPoPKeyPair('ES256', { extractable: true })
  const DPoP = client.getDPoPHandle(config, pair)
  const response = await client.initiateDeviceAuthorization(config, { scope: input.scope })
  process.stdout.write(JSON.stringify({ device: response }) + '\n')
  const tokens = await client.pollDeviceAuthorizationGrant(config, response, undefined, { DPoP })
  const userinfo = await client.fetchUserInfo(config, tokens.access_token, client.skipSubjectCheck, { DPoP })
  return { tokens: { ...tokens }, publicJwk: await crypto.subtle.exportKey('jwk', pair.publicKey), userinfo }
}

const steps = { start, finish, device }

try {
  const result = await steps[step]()
  process.stdout.write(JSON.stringify(result))
} catch (error) {
  process.stdout.write(JSON.stringify({
    error: error.message, code: error.code, cause: error.cause ? String(error.cause.message ?? error.cause) : null
  }))
  process.exit(1)
}
