def test_account_answers_for_its_key(alice):
    response = alice.get("/account")
    assert response.status_code == 200
    assert response.json["id"] == alice.account_id
