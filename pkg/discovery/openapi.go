package discovery

import _ "embed"

// openAPIDocument is served at GET /openapi.json. TestOpenAPIMatchesRoutes
// keeps it in step with routes().
//
//go:embed openapi.json
var openAPIDocument []byte
