// lbauth passkeys: WebAuthn in the browser, with no library. The server writes the options as
// JSON and reads credential.toJSON(); the browser's parse*OptionsFromJSON turn the one into the
// other. Every call sends the page's XSRF token; an error answer's message is shown as it is.
(function () {
  "use strict";

  // Browsers refuse an IP address as a passkey's domain: offer nothing there.
  var ipAddress = /^[0-9.]+$/.test(location.hostname) || location.hostname.indexOf(":") >= 0 ||
    location.hostname.charAt(0) === "[";
  var supported = !ipAddress && window.PublicKeyCredential && PublicKeyCredential.parseRequestOptionsFromJSON &&
    PublicKeyCredential.parseCreationOptionsFromJSON;

  function xsrf() {
    var field = document.querySelector('input[name="_xsrf"]');
    return field ? field.value : "";
  }

  async function call(path, body) {
    var answer = await fetch(path, {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-XSRFToken": xsrf()},
      body: JSON.stringify(body || {})
    });
    var envelope = null;
    try { envelope = await answer.json(); } catch (e) { envelope = null; }
    if (!answer.ok || !envelope || envelope.code !== 0) {
      var refused = new Error(envelope && envelope.message ? envelope.message :
        "The server could not be reached; try again.");
      refused.fromServer = true;
      throw refused;
    }
    return envelope.data;
  }

  function say(element, message) {
    if (!element) return;
    element.textContent = message;
    element.hidden = !message;
  }

  // What the browser says when the user cancels, or when a newer request replaced this one.
  function cancelled(error) {
    return error && (error.name === "NotAllowedError" || error.name === "AbortError");
  }

  // ---- signing in: "Sign in with a passkey", autofill, and the second step ----------------------

  var box = document.getElementById("passkey");
  if (box) {
    var button = box.querySelector("button");
    var problem = document.getElementById("passkey-error");
    var next = box.getAttribute("data-next") || "/account/apps";
    var optionsPath = box.getAttribute("data-options");
    var signInPath = box.getAttribute("data-sign-in");
    var autofill = null;  // the conditional request's AbortController
    var retries = 0;

    var signIn = async function (mediation) {
      var options = await call(optionsPath);
      var request = {publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options)};
      if (mediation) {
        autofill = new AbortController();
        request.mediation = mediation;
        request.signal = autofill.signal;
      }
      var credential = await navigator.credentials.get(request);
      var data = await call(signInPath, {credential: credential.toJSON(), next: next});
      window.location.assign(data.next);
    };

    var startAutofill = async function () {
      var field = document.querySelector('input[autocomplete~="webauthn"]');
      if (!field || !PublicKeyCredential.isConditionalMediationAvailable ||
          !(await PublicKeyCredential.isConditionalMediationAvailable())) {
        return;
      }
      try {
        await signIn("conditional");
      } catch (error) {
        // Autofill runs in the background: the browser's own refusals end it quietly; a passkey the
        // user picked that the server refused is said, and the passkeys are offered once more.
        if (error && error.fromServer && retries < 1) {
          retries += 1;
          say(problem, error.message);
          startAutofill();
        }
      }
    };

    if (supported && button) {
      box.hidden = false;
      button.addEventListener("click", async function () {
        say(problem, "");
        if (autofill) autofill.abort();
        button.disabled = true;
        try {
          await signIn(null);
        } catch (error) {
          say(problem, cancelled(error) ? "No passkey was used. Try again, or use another way to sign in." :
            error.message);
          retries = 0;
          startAutofill();
        } finally {
          button.disabled = false;
        }
      });
      startAutofill();
    }
  }

  // ---- adding a passkey at /account/security ------------------------------------------------------

  var form = document.getElementById("passkey-add");
  if (form && supported) {
    form.hidden = false;
    var unsupported = document.getElementById("passkey-unsupported");
    if (unsupported) unsupported.hidden = true;
    var addProblem = document.getElementById("passkey-add-error");
    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      say(addProblem, "");
      var submit = form.querySelector("button");
      submit.disabled = true;
      try {
        var options = await call("/account/security/passkeys/options");
        var credential = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options)});
        var data = await call("/account/security/passkeys", {
          credential: credential.toJSON(), name: form.querySelector('input[name="name"]').value});
        if (data.recoveryCodes) {
          var list = document.getElementById("passkey-recovery-codes");
          data.recoveryCodes.forEach(function (code) {
            var item = document.createElement("li");
            var text = document.createElement("code");
            text.textContent = code;
            item.appendChild(text);
            list.appendChild(item);
          });
          form.hidden = true;
          document.getElementById("passkey-codes").hidden = false;
          document.getElementById("passkey-codes-heading").focus();
        } else {
          window.location.assign(form.getAttribute("data-done"));
        }
      } catch (error) {
        say(addProblem, cancelled(error) ? "No passkey was added." : error.message);
      } finally {
        submit.disabled = false;
      }
    });
  }
})();
